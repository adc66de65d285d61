/* glibc_malloc--1.6--1.7.sql */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION UPDATE
\echo Use "ALTER EXTENSION glibc_malloc UPDATE TO '1.7'" to load this file. \quit
