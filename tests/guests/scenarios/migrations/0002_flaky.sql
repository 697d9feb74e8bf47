-- Fails with SQLSTATE `code` on its first `failures` calls, then answers
-- true: an infrastructure failure on demand (a sequence counts the calls,
-- and a sequence is not rolled back with the transaction).
CREATE SEQUENCE scenario.flaky_calls;

CREATE FUNCTION scenario.flaky(code text, failures integer) RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
    IF nextval('scenario.flaky_calls') <= failures THEN
        RAISE EXCEPTION 'flaky failure %', code USING ERRCODE = code;
    END IF;
    RETURN true;
END
$$;
