-- The analytic workloads' tables: TPC-H's schema, cut down to the columns
-- the queries read, filled by generate_series and random() (setseed: the
-- same rows every run).  psql variable scale: TPC-H's scale factor (1 makes
-- 1,500,000 orders and about 6,000,000 line items; bench/measure uses 0.1).
SELECT (1500000 * :scale)::int AS orders, greatest((150000 * :scale)::int, 10) AS customers,
       greatest((200000 * :scale)::int, 10) AS parts, greatest((10000 * :scale)::int, 10) AS suppliers \gset
SELECT setseed(0.17);
DROP TABLE IF EXISTS lineitem, orders, customer, part, supplier, nation, region;

CREATE TABLE region AS
SELECT * FROM (VALUES (0, 'AFRICA'), (1, 'AMERICA'), (2, 'ASIA'), (3, 'EUROPE'), (4, 'MIDDLE EAST'))
  AS r(r_regionkey, r_name);

CREATE TABLE nation AS
SELECT * FROM (VALUES (0, 'ALGERIA', 0), (1, 'ARGENTINA', 1), (2, 'BRAZIL', 1), (3, 'CANADA', 1),
  (4, 'EGYPT', 4), (5, 'ETHIOPIA', 0), (6, 'FRANCE', 3), (7, 'GERMANY', 3), (8, 'INDIA', 2),
  (9, 'INDONESIA', 2), (10, 'IRAN', 4), (11, 'IRAQ', 4), (12, 'JAPAN', 2), (13, 'JORDAN', 4),
  (14, 'KENYA', 0), (15, 'MOROCCO', 0), (16, 'MOZAMBIQUE', 0), (17, 'PERU', 1), (18, 'CHINA', 2),
  (19, 'ROMANIA', 3), (20, 'SAUDI ARABIA', 4), (21, 'VIETNAM', 2), (22, 'RUSSIA', 3),
  (23, 'UNITED KINGDOM', 3), (24, 'UNITED STATES', 1)) AS n(n_nationkey, n_name, n_regionkey);

CREATE TABLE supplier AS
SELECT s AS s_suppkey, 'Supplier#' || lpad(s::text, 9, '0') AS s_name,
       (random() * 24)::int AS s_nationkey, (random() * 10000 - 1000)::numeric(15,2) AS s_acctbal
FROM generate_series(1, :suppliers) s;

CREATE TABLE customer AS
SELECT c AS c_custkey, 'Customer#' || lpad(c::text, 9, '0') AS c_name,
       (random() * 24)::int AS c_nationkey, (random() * 10000 - 1000)::numeric(15,2) AS c_acctbal,
       (ARRAY['AUTOMOBILE', 'BUILDING', 'FURNITURE', 'HOUSEHOLD', 'MACHINERY'])[1 + (random() * 4)::int] AS c_mktsegment
FROM generate_series(1, :customers) c;

CREATE TABLE part AS
SELECT p AS p_partkey, md5(p::text) AS p_name, 1 + (random() * 49)::int AS p_size,
       (900 + p % 1000 + (p / 10) % 100 / 100.0)::numeric(15,2) AS p_retailprice
FROM generate_series(1, :parts) p;

CREATE TABLE orders AS
SELECT o AS o_orderkey, 1 + (random() * (:customers - 1))::int AS o_custkey,
       (random() * 400000 + 1000)::numeric(15,2) AS o_totalprice,
       date '1992-01-01' + (random() * 2405)::int AS o_orderdate,
       (ARRAY['1-URGENT', '2-HIGH', '3-MEDIUM', '4-NOT SPECIFIED', '5-LOW'])[1 + (random() * 4)::int] AS o_orderpriority,
       0 AS o_shippriority
FROM generate_series(1, :orders) o;

-- 1 to 7 line items per order, 4 on average.
CREATE TABLE lineitem AS
SELECT l_orderkey, l_partkey, l_suppkey, l_linenumber, l_quantity,
       (l_quantity * (900 + random() * 1100))::numeric(15,2) AS l_extendedprice, l_discount, l_tax,
       (CASE WHEN l_receiptdate > date '1995-06-17' THEN 'N' WHEN random() < 0.5 THEN 'R' ELSE 'A' END)::char(1) AS l_returnflag,
       (CASE WHEN l_shipdate > date '1995-06-17' THEN 'O' ELSE 'F' END)::char(1) AS l_linestatus,
       l_shipdate, l_commitdate, l_receiptdate, l_shipmode, l_comment
FROM (SELECT l_orderkey, l_partkey, l_suppkey, l_linenumber, l_quantity, l_discount, l_tax, l_shipdate,
             l_commitdate, l_shipdate + 1 + (random() * 29)::int AS l_receiptdate, l_shipmode, l_comment
      FROM (SELECT o_orderkey AS l_orderkey, 1 + (random() * (:parts - 1))::int AS l_partkey,
                   1 + (random() * (:suppliers - 1))::int AS l_suppkey, n AS l_linenumber,
                   (1 + (random() * 49)::int)::numeric(15,2) AS l_quantity,
                   (random() * 0.1)::numeric(15,2) AS l_discount, (random() * 0.08)::numeric(15,2) AS l_tax,
                   o_orderdate + 1 + (random() * 120)::int AS l_shipdate,
                   o_orderdate + 30 + (random() * 60)::int AS l_commitdate,
                   (ARRAY['AIR', 'FOB', 'MAIL', 'RAIL', 'REG AIR', 'SHIP', 'TRUCK'])[1 + (random() * 6)::int] AS l_shipmode,
                   substr(md5(random()::text) || md5(random()::text), 1, 10 + (random() * 33)::int) AS l_comment
            FROM orders, generate_series(1, 4 + mod(hashint4(o_orderkey), 4)) n) items) dated;

-- No indexes: the queries run on hash joins, hash aggregates and sorts.
VACUUM ANALYZE region, nation, supplier, customer, part, orders, lineitem;
