# glibc_malloc: a thin PGXS Makefile.

MODULE_big = glibc_malloc
OBJS = glibc_malloc.o settings.o allocator.o stats.o idle.o shmem.o

EXTENSION = glibc_malloc
# The version has one source: the control file.
EXTVERSION = $(shell sed -n "s/^default_version = '\(.*\)'/\1/p" $(dir $(firstword $(MAKEFILE_LIST)))glibc_malloc.control)
DATA = glibc_malloc--1.0.sql glibc_malloc--1.0--1.1.sql
PGFILEDESC = "glibc_malloc - glibc malloc tunables under PostgreSQL control"

REGRESS = glibc_malloc_gucs glibc_malloc_presets glibc_malloc_functions glibc_malloc_effect glibc_malloc_permissions glibc_malloc_backends glibc_malloc_upgrade

TAP_TESTS = 1

PG_CFLAGS = -Wall -Werror
PG_CPPFLAGS = -DGM_VERSION='"$(EXTVERSION)"'
SHLIB_LINK = -ldl

PG_CONFIG ?= pg_config
PGXS := $(shell $(PG_CONFIG) --pgxs)
include $(PGXS)
