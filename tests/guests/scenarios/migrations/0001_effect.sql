-- What the scenarios test guest wrote: one row per note.
CREATE TABLE scenario.effect (
    event_id uuid NOT NULL,
    note     text NOT NULL,
    PRIMARY KEY (event_id, note)
);
