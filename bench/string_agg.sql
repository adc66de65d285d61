SELECT length(string_agg(md5(g::text), ',')) FROM generate_series(1, 300000) g;
