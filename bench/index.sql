CREATE INDEX ix_a ON ix (a);
