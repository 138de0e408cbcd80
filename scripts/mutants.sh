#!/usr/bin/env bash
# Mutation testing of the safety-critical code with cargo-mutants
# (`cargo install --locked cargo-mutants`). Not part of CI: each mutant is a
# rebuild and a test run, about a minute on 2 cores, so a full run takes
# hours. Needs the same Redis and MariaDB as `cargo test`.
#
#   bash scripts/mutants.sh [GROUP...]   # planner repair-path store-scripts pass (default: all)
#   ITERATE=1 bash scripts/mutants.sh ...  # again, skipping what the last run caught
#
# Results land in mutants.out/<group>/ (caught.txt, missed.txt, timeout.txt,
# unviable.txt and a log per mutant). Tests run with --no-fail-fast, so each
# log names every test that caught its mutant.
#
# What is mutated, and by which tests:
# - planner: all of src/plan.rs (the pure decisions), by the unit and
#   property tests and the integration tests that run the planner end to end.
# - repair-path: the sweep's lock → re-check → script, the expired-orders
#   cancel chain, the showtime lease, the conditional MySQL writes.
# - store-scripts: the store functions that call the Lua scripts (repairs,
#   rebuilds, suspects, leases) and decode their replies.
# - pass: the daemon's pass lease (src/pass.rs and its Redis calls), by the
#   real-daemon tests in tests/it/passes.rs.
#
# The integration tests are two test targets: `it` (tests/it/) and
# `failpoints` (tests/failpoints/, the tests that arm failpoints). Either
# names a test `<file>::<test>` after its file, so a group picks its test
# targets (--cargo-arg=--lib, --cargo-arg=--test=...) and, within them, its
# tests by name: libtest runs those whose name contains one of the group's
# filters (`::tests::` is every unit test of the library, `races::` the race
# tests, `safety::` tests/it/safety.rs, ...).
set -euo pipefail
cd "$(dirname "$0")/.."

run() { # group, test-name filters (comma-separated), then cargo-mutants filters and --cargo-arg=<test target>s
  local group=$1 list=$2; shift 2
  local names filters=() name
  IFS=, read -ra names <<< "$list"
  for name in "${names[@]}"; do filters+=("--cargo-test-arg=$name"); done
  echo "== mutants: $group =="
  mkdir -p "mutants.out/$group"
  # Test targets go in --cargo-arg, so each mutant builds only those; the
  # name filters go to the test binaries, after `--`.
  cargo mutants --in-place --baseline skip --profile mutants --no-shuffle ${ITERATE:+--iterate} \
    --timeout 150 --build-timeout 600 --output "mutants.out/$group" "$@" \
    --cargo-test-arg=--no-fail-fast --cargo-test-arg=-- "${filters[@]}" \
    || true # non-zero when a mutant is missed
  for outcome in caught missed timeout unviable; do
    printf '%-9s %s\n' "$outcome" "$(wc -l < "mutants.out/$group/mutants.out/$outcome.txt")"
  done
}

groups=("$@")
[ ${#groups[@]} -gt 0 ] || groups=(planner repair-path store-scripts pass)
for group in "${groups[@]}"; do
  case $group in
    planner)
      run planner ::tests::,planner_props::,safety::,races:: --file src/plan.rs \
        --cargo-arg=--lib --cargo-arg=--test=it --cargo-arg=--test=failpoints ;;
    repair-path)
      run repair-path races::,safety::,own_keys:: \
        --file src/jobs/seat_sweep.rs --file src/jobs/expired_orders.rs \
        --file src/lease.rs --file src/store/mysql.rs \
        --re "Sweep<'a, '_>::(apply|repair_seats|rebuild)\b" \
        --re '\b(cancel_chunk|cancel_locked)\b' \
        --re 'RunLeases::(acquire|renew_due|release)\b' \
        --re 'MysqlStore::(cancel_expired|cancelled_by_us_since|seat_history)\b' \
        --cargo-arg=--test=it --cargo-arg=--test=failpoints ;;
    store-scripts)
      run store-scripts races::,safety::,own_keys:: --file src/store/redis.rs \
        --re 'RedisStore::(update_suspects|repair_seats|rebuild_hash|acquire_leases|renew_leases|release_leases)\b' \
        --cargo-arg=--test=it --cargo-arg=--test=failpoints ;;
    pass)
      run pass ::tests::,passes:: --file src/pass.rs --file src/store/redis.rs \
        --re 'src/pass\.rs' \
        --re 'RedisStore::(claim_pass|renew_pass|release_pass|finish_pass)\b' \
        --cargo-arg=--lib --cargo-arg=--test=it ;;
    *) echo "unknown group $group (planner, repair-path, store-scripts, pass)" >&2; exit 2 ;;
  esac
done
