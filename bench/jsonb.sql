-- jsonb built and parsed: a document per order of 1995 with its line items (jsonb_build_object,
-- jsonb_agg), printed and parsed back, then read with ->>, jsonb_each and jsonb_to_recordset.
WITH docs AS MATERIALIZED (
  SELECT jsonb_build_object('orderkey', o_orderkey, 'custkey', o_custkey, 'date', o_orderdate,
           'priority', o_orderpriority, 'lines',
           jsonb_agg(jsonb_build_object('line', l_linenumber, 'part', l_partkey, 'qty', l_quantity,
             'price', l_extendedprice, 'disc', l_discount, 'mode', l_shipmode, 'comment', l_comment)))::text::jsonb AS doc
  FROM orders JOIN lineitem ON l_orderkey = o_orderkey
  WHERE o_orderdate >= date '1995-01-01' AND o_orderdate < date '1996-01-01'
  GROUP BY o_orderkey, o_custkey, o_orderdate, o_orderpriority)
SELECT (SELECT count(*) FROM docs, jsonb_each(doc)) AS keys,
       (SELECT sum((doc ->> 'custkey')::bigint) FROM docs) AS custkeys,
       (SELECT sum(l.qty * l.price * (1 - l.disc)) || ' ' || count(DISTINCT l.mode) || ' ' || sum(length(l.comment))
        FROM docs, jsonb_to_recordset(doc -> 'lines') AS l(line int, part int, qty numeric, price numeric,
          disc numeric, mode text, comment text)) AS lines;
