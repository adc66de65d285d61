# glibc_malloc: a thin PGXS Makefile.

MODULE_big = glibc_malloc
OBJS = glibc_malloc.o settings.o allocator.o stats.o idle.o

EXTENSION = glibc_malloc
DATA = glibc_malloc--1.0.sql
PGFILEDESC = "glibc_malloc - glibc malloc tunables under PostgreSQL control"

REGRESS = glibc_malloc_gucs glibc_malloc_presets glibc_malloc_functions glibc_malloc_effect glibc_malloc_permissions

TAP_TESTS = 1

PG_CFLAGS = -Wall -Werror
SHLIB_LINK = -ldl

PG_CONFIG ?= pg_config
PGXS := $(shell $(PG_CONFIG) --pgxs)
include $(PGXS)
