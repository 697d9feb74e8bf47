CREATE SCHEMA IF NOT EXISTS scenario;

-- What the scenarios test guest wrote: one row per note.
CREATE TABLE IF NOT EXISTS scenario.effect (
    event_id uuid NOT NULL,
    note     text NOT NULL,
    PRIMARY KEY (event_id, note)
);
