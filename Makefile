# glibc_malloc: a thin PGXS Makefile.

MODULE_big = glibc_malloc
OBJS = glibc_malloc.o settings.o allocator.o stats.o doctor.o guard.o monitor.o statements.o idle.o shmem.o guard_policy.o memsource.o

EXTENSION = glibc_malloc
# The version has one source: the control file.
EXTVERSION = $(shell sed -n "s/^default_version = '\(.*\)'/\1/p" $(dir $(firstword $(MAKEFILE_LIST)))glibc_malloc.control)
DATA = glibc_malloc--1.0.sql glibc_malloc--1.0--1.1.sql glibc_malloc--1.1--1.2.sql glibc_malloc--1.2--1.3.sql glibc_malloc--1.3--1.4.sql glibc_malloc--1.4--1.5.sql glibc_malloc--1.5--1.6.sql glibc_malloc--1.6--1.7.sql glibc_malloc--1.7--1.8.sql
PGFILEDESC = "glibc_malloc - glibc malloc tunables under PostgreSQL control"

REGRESS = glibc_malloc_gucs glibc_malloc_prefix glibc_malloc_presets glibc_malloc_limits glibc_malloc_functions glibc_malloc_effect glibc_malloc_permissions glibc_malloc_backends glibc_malloc_upgrade

# The TAP tests (t/) start servers as a non-root user; packaging builds
# (debian/rules, autopkgtest) run only pg_regress and set NO_TAP_TESTS.
ifndef NO_TAP_TESTS
TAP_TESTS = 1
endif

PG_CFLAGS = -Wall -Werror
PG_CPPFLAGS = -DGM_VERSION='"$(EXTVERSION)"'
SHLIB_LINK = -ldl

PG_CONFIG ?= pg_config
PGXS := $(shell $(PG_CONFIG) --pgxs)
include $(PGXS)

# Every object includes the two headers (PGXS tracks no dependencies
# unless the server was configured with --enable-depend): a changed struct
# must rebuild them all (and the JIT's bitcode), or they disagree on its
# layout.
$(OBJS) $(OBJS:.o=.bc): glibc_malloc.h glibc_malloc_compat.h

# timer_create lives in librt before glibc 2.34 (a stub library after).
ifeq ($(PORTNAME),linux)
SHLIB_LINK += -lrt
endif

# ---- release: PGXN archive, version checks ----

EXTRA_CLEAN = META.json glibc_malloc-*.zip

# META.json carries the control file's version.
META.json: META.json.in glibc_malloc.control
	sed 's/@VERSION@/$(EXTVERSION)/g' $< > $@

# The archive PGXN takes: the committed tree plus the generated META.json.
dist: META.json
	git archive --format zip --prefix=glibc_malloc-$(EXTVERSION)/ --add-file=META.json -o glibc_malloc-$(EXTVERSION).zip HEAD

# The version appears in the control file only; check everything agrees.
versioncheck: META.json
	@test -f glibc_malloc--$(EXTVERSION).sql || ls glibc_malloc--*--$(EXTVERSION).sql >/dev/null 2>&1 || \
	  { echo "no install or upgrade script ends at version $(EXTVERSION)"; exit 1; }
	@for f in glibc_malloc--*.sql; do echo " $(DATA) " | grep -q " $$f " || { echo "$$f is not in DATA"; exit 1; }; done
	@grep -q '"version": "$(EXTVERSION)"' META.json || { echo "META.json does not say $(EXTVERSION)"; exit 1; }
	@head -1 debian/changelog | grep -q '($(EXTVERSION)' || { echo "debian/changelog does not start at $(EXTVERSION)"; exit 1; }
	@echo "version $(EXTVERSION): control file, SQL scripts, META.json and debian/changelog agree"

.PHONY: dist versioncheck
