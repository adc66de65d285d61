-- Window functions over large partitions: line items partitioned by return flag (3 partitions,
-- the largest about half the table), a running sum and each row's share of its partition's total.
SELECT count(*), sum(rn), max(running), min(share)
FROM (SELECT row_number() OVER w AS rn, sum(l_extendedprice) OVER w AS running,
             l_extendedprice / sum(l_extendedprice) OVER (PARTITION BY l_returnflag) AS share
      FROM lineitem
      WINDOW w AS (PARTITION BY l_returnflag ORDER BY l_shipdate, l_orderkey, l_linenumber)) s;
