//! Native handlers (`idem::runtime::native`): compiled into the program,
//! run by the same executor with the same capabilities as a component.

use std::future::Future;
use std::pin::Pin;

use idem::runtime::bindings::db::{DbError, Value};
use idem::runtime::bindings::types::{Event as WitEvent, HandlerError};
use idem::runtime::{NativeContext, NativeHandler, NativeResult};
use idem::{Handler, Outcome};

use super::{CHARGES, CLAIMS, Setup, order};

#[tokio::test]
async fn a_native_handler_is_deduplicated_and_keyed_like_a_component() {
    let s = Setup::new().await;
    let native = idem_tests::native::handlers().get("billing").expect("registered");
    let handler = Handler::native(&s.runtime, "billing", native, s.settings("billing"));
    assert_eq!(handler.sha256(), "native:billing");
    let billing = s.executor_for(handler);
    let e = order();
    assert_eq!(billing.execute(&e, 1).await.expect("first execution"), Outcome::Processed);
    assert_eq!(billing.execute(&e, 1).await.expect("second execution"), Outcome::Duplicate);
    assert_eq!(s.count(CHARGES).await, 1);
    assert_eq!(s.count(CLAIMS).await, 1);
    assert_eq!(s.provider.keys(), vec![Some(e.id.to_string())], "the host added the key; the duplicate never called");
    s.finish().await;
}

/// Runs the statement the event's payload names, and answers its error.
struct RunsWhatItIsTold;

impl NativeHandler for RunsWhatItIsTold {
    fn handle<'a>(
        &'a self,
        event: &'a WitEvent,
        cx: &'a mut NativeContext<'_>,
    ) -> Pin<Box<dyn Future<Output = NativeResult> + Send + 'a>> {
        Box::pin(async move {
            let payload: serde_json::Value = serde_json::from_str(&event.payload)?;
            let statement = payload["statement"].as_str().unwrap_or_default();
            Ok(match cx.execute(statement, vec![Value::Null]).await? {
                Ok(_) => Ok(()),
                Err(DbError::Refused(m)) => Err(HandlerError::Permanent(format!("refused: {m}"))),
                Err(e) => Err(HandlerError::Permanent(format!("{e:?}"))),
            })
        })
    }
}

#[tokio::test]
async fn a_native_handler_gets_the_same_statement_checks_and_role() {
    let s = Setup::new().await;
    let handler = Handler::native(&s.runtime, "billing", std::sync::Arc::new(RunsWhatItIsTold), s.settings("billing"));
    let exec = s.executor_for(handler);
    for statement in [
        // The statement filter refuses it before the server sees it.
        "COPY (SELECT 1) TO PROGRAM 'id'",
        // The role has no rights on idem's own tables.
        "DELETE FROM idem.processed_event WHERE $1::text IS NULL",
    ] {
        let mut e = super::event(serde_json::json!({ "eventType": "test.v1", "statement": statement }));
        e.payload = serde_json::json!({ "statement": statement }).to_string();
        let err = exec.execute(&e, 1).await.expect_err(statement);
        assert!(
            err.to_string().contains("refused") || err.to_string().contains("permission denied"),
            "{statement}: {err}"
        );
    }
    assert_eq!(s.count(CLAIMS).await, 0, "failed events leave no claim");
    s.finish().await;
}
