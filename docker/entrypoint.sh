#!/bin/sh
# The image's entry point: bring the database schema up to date, then run the command (CMD, or the compose
# service's). A container started on its own (`docker run`) therefore serves a migrated database.
#
# MOONCAKE_MIGRATE=0 skips the migration: docker/compose.yaml sets it on every service and runs one
# one-shot `migrate` service first, because several replicas migrating one PostgreSQL at the same moment
# race on the same tables.
set -eu

if [ "${MOONCAKE_MIGRATE:-1}" != "0" ]; then
    python manage.py migrate --noinput
fi
exec "$@"
