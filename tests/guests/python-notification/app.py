# A handler in Python, built with componentize-py against wit/ by the test
# harness: the notification example's effect, so that a test can show a
# Python component loads through the host's import allowlist and runs in
# the sandbox like a Rust one.
import json

from wit_world import WitWorld
from wit_world.imports import db, log, types


class WitWorld(WitWorld):
    def handle(self, event: types.Event) -> None:
        order = json.loads(event.payload)
        db.execute(
            "INSERT INTO notification.sent (event_id, customer_id, message) VALUES ($1, $2, $3)",
            [db.Value_Uuid(event.id), db.Value_Int64(order["customerId"]), db.Value_Text("from python")],
        )
        log.log(log.Level.INFO, "python handled " + event.id)
