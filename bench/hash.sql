SELECT count(*) FROM (SELECT a % 50000, count(*), max(c1) FROM t GROUP BY 1) s;
SELECT count(*) FROM t t1 JOIN t t2 ON t1.a = t2.a;
