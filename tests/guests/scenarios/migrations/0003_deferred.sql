-- A foreign key checked at COMMIT, not at the statement: a row naming a
-- parent that does not exist fails the transaction's COMMIT (23503).
CREATE TABLE scenario.deferred_parent (id integer PRIMARY KEY);
CREATE TABLE scenario.deferred_child (
    parent integer NOT NULL REFERENCES scenario.deferred_parent (id) DEFERRABLE INITIALLY DEFERRED
);
