-- Operators' rates at run time (`idem throttle`, POST
-- /handlers/{name}/throttle; host/src/throttle.rs): each row replaces the
-- config's rate for one target of one handler — its events (`events`) or
-- its requests to one destination host — on every host, which reads the
-- table each second. per_second NULL: no limit. Deleting the row goes back
-- to the config's rate.
CREATE TABLE idem.throttle (
    handler    text             NOT NULL,
    target     text             NOT NULL,
    per_second double precision CHECK (per_second > 0),
    burst      integer          CHECK (burst > 0),
    reason     text             NOT NULL DEFAULT '',
    set_by     text             NOT NULL,
    set_at     timestamptz      NOT NULL DEFAULT now(),
    PRIMARY KEY (handler, target)
);
