-- The COPY workload: an empty unlogged table of 24 columns, and psql
-- variable rows rows for it (about 1 kB each) written once to the
-- server-side file copy_file.
DROP TABLE IF EXISTS copy_t;
CREATE UNLOGGED TABLE copy_t (id int, i1 int, i2 int, i3 int, i4 int, b1 bigint, b2 bigint, b3 bigint,
  n1 numeric(15,2), n2 numeric(15,2), n3 numeric(15,4), n4 numeric, t1 timestamptz, t2 timestamptz,
  d1 date, d2 date, s1 text, s2 text, s3 text, s4 text, v1 varchar(64), flag boolean, note text, payload text);
COPY (SELECT g, g % 7, g % 1000, g * 3, -g, g::bigint * 1000003, g::bigint << 20, -g::bigint,
             (g % 100000) / 100.0, g / 7.0, g / 13.0, g * 1.000001,
             timestamptz '2020-01-01 00:00:00+00' + g * interval '1 second', timestamptz '2024-06-30 12:00:00+00' - g * interval '1 minute',
             date '2000-01-01' + g % 9000, date '2030-12-31' - g % 5000,
             md5(g::text), md5((g + 1)::text), md5((g + 2)::text), md5((g + 3)::text), 'customer ' || g,
             g % 2 = 0, 'a "quoted", comma; separated' || chr(9) || 'note ' || g, repeat(md5(g::text), 20)
      FROM generate_series(1, :rows) g) TO :'copy_file';
