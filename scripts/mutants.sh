#!/usr/bin/env bash
# Mutation testing of the safety-critical code. Not part of CI (the full run
# is about two hours on 2 cores); needs the same Redis and MariaDB as
# `cargo test`, and cargo-mutants (`cargo install --locked cargo-mutants`).
#
#   bash scripts/mutants.sh [GROUP...]   # default: every group
#   ITERATE=1 bash scripts/mutants.sh …  # again, skipping what the last run caught
#
# Groups, and what judges their mutants:
# - planner: plan/ and the strict reading of rows (model/contract.rs,
#   occupancy.rs), in crates/seatflow-core, by its unit and property tests
#   and the integration tests that run the planner end to end.
# - repair-path: the sweep's lease → confirmation → script, the expired-orders
#   cancel chain, the showtime lease, the conditional MySQL writes and the
#   confirmation's reading (with the decoding of a seat row and its order's
#   dates, rule 16).
# - store-scripts: the store functions that call the Lua scripts (repairs,
#   rebuilds, suspects, leases) and decode their replies.
# - pass: the daemon's pass lease (src/run/pass_lease/mod.rs and its Redis calls).
# - lua: every Lua script (src/store/lua/), by scripts/mutants/guards.py.
# - sql: the SQL text of the conditional cancel and of the confirmation before
#   a write, by scripts/mutants/guards.py.
#
# Each group runs its tests unmutated first and stops the run when they
# fail. Results land in mutants.out/<group>/mutants.out/ (caught.txt,
# missed.txt, timeout.txt, unviable.txt, logs/). Then verdict.py updates
# scripts/mutants/summary.md (commit it) and exits non-zero when a mutant
# survived that scripts/mutants/survivors.txt does not list with a reason.
# The list keys a mutant by its file, function and mutation, not by line and
# column (`src/run/pass_lease/mod.rs: replace < with <= in PassFence::holds`), so edits
# elsewhere do not unlist it; verdict.py's docstring says how the key is
# made, and `python3 scripts/mutants/verdict.py --self-test` checks it.
#
# The integration tests are two test targets: `it` (tests/it/, in the
# product's package) and `failpoints` (tests/failpoints/, the tests that arm
# failpoints, a package of their own: seatflow-failpoint-tests). A test is
# named after its module path, `<folder>::<file>::<test>` in `it`
# (`repairs::safety::...`) and `<file>::<test>` in `failpoints`, and cargo
# filters by substring, so a group picks its targets and, within them, its
# tests by file (`::tests::` is every unit test of the library, `races::`
# the race tests, `safety::` tests/it/repairs/safety.rs, ...). A group that
# tests both targets names both packages (`--test-package`); cargo-mutants
# then builds them in one invocation, so the product under `it` has its
# failpoints too there, as it had before the failpoint tests had a package.
set -euo pipefail
cd "$(dirname "$0")/.."

rust() { # group, test-name filters (comma-separated), then cargo-mutants filters and --cargo-arg=<test target>s
  local group=$1 list=$2; shift 2
  local names filters=() name status=0
  IFS=, read -ra names <<< "$list"
  for name in "${names[@]}"; do filters+=("--cargo-test-arg=$name"); done
  echo "== mutants: $group =="
  mkdir -p "mutants.out/$group"
  # Test targets go in --cargo-arg, so each mutant builds only those; the
  # name filters go to the test binaries, after `--`.
  cargo mutants --in-place --no-shuffle ${ITERATE:+--iterate} \
    --timeout 150 --build-timeout 600 --output "mutants.out/$group" "$@" \
    --cargo-test-arg=-- "${filters[@]}" || status=$?
  # 2 and 3 are missed mutants and timeouts: the verdict judges those.
  case $status in
    0|2|3) ;;
    4) echo "$group: the tests fail unmutated; nothing was judged" >&2; exit 1 ;;
    *) echo "$group: cargo-mutants failed ($status)" >&2; exit 1 ;;
  esac
}

guards() { # lua or sql
  echo "== mutants: $1 =="
  python3 scripts/mutants/guards.py "$1" ${ITERATE:+--iterate}
}

# The product's tests and the failpoint tests' package: the tests of both run
# for every mutant of a group that names them.
both=(--test-package=seatflow-reconciler --test-package=seatflow-failpoint-tests)

all=(planner repair-path store-scripts pass lua sql)
groups=("$@")
[ ${#groups[@]} -gt 0 ] || groups=("${all[@]}")
for group in "${groups[@]}"; do
  case $group in
    planner)
      rust planner ::tests::,planner_props::,safety::,strict_reading::,bad_data::,races:: \
        --file 'crates/seatflow-core/src/plan/*.rs' --file crates/seatflow-core/src/model/contract.rs \
        --file crates/seatflow-core/src/model/occupancy.rs --test-package=seatflow-core \
        --cargo-arg=--lib --cargo-arg=--test=it --cargo-arg=--test=failpoints "${both[@]}" ;;
    repair-path)
      rust repair-path races::,safety::,own_keys::,strict_reading::,jobs:: \
        --file src/run/jobs/seat_sweep/repair.rs --file src/run/jobs/expired_orders.rs \
        --file src/run/showtime_leases.rs --file src/store/mysql/orders.rs --file src/store/mysql/confirm/mod.rs \
        --file src/store/mysql/sql.rs \
        --re "Sweep<'a, '_>::(apply|repair_seats|rebuild)\b" \
        --re '\b(seat_row_facts|order_dates)\b' \
        --re '\b(cancel_chunk|cancel_locked)\b' \
        --re 'RunLeases::(acquire|renew_due|release)\b' \
        --re 'MysqlStore::(cancel_expired|cancelled_by_us_since|confirm_seats|seats_named)\b' \
        --re '\bpush_position\b' \
        --cargo-arg=--test=it --cargo-arg=--test=failpoints "${both[@]}" ;;
    store-scripts)
      rust store-scripts races::,safety::,own_keys::,strict_reading::,jobs:: \
        --file src/store/redis/seats.rs --file src/store/redis/leases.rs \
        --re 'RedisStore::(update_suspects|repair_seats|rebuild_hash|acquire_leases|renew_leases|release_leases)\b' \
        --cargo-arg=--test=it --cargo-arg=--test=failpoints "${both[@]}" ;;
    pass)
      rust pass ::tests::,passes::,cluster::,own_keys:: --file src/run/pass_lease/mod.rs --file src/store/redis/leases.rs \
        --re 'src/run/pass_lease/mod\.rs' \
        --re 'RedisStore::(claim_pass|renew_pass|release_pass|finish_pass)\b' \
        --cargo-arg=--lib --cargo-arg=--test=it ;;
    lua|sql) guards "$group" ;;
    *) echo "unknown group $group (${all[*]})" >&2; exit 2 ;;
  esac
done
python3 scripts/mutants/verdict.py "${groups[@]}"
