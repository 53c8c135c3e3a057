#!/usr/bin/env bash
# Builds what scripts/gpu-check.sh runs on a GPU machine that has no Rust: the release `kvplan`
# and the kvplan-exec integration tests, stripped of debug info, into DIR [default: .gpu].
set -euo pipefail
cd "$(dirname "$0")/.."
DIR=${1:-.gpu}
mkdir -p "$DIR"
cargo build --release --locked
tests=$(cargo test --release --locked -p kvplan-exec --test main --no-run --message-format=json |
  sed -n 's/.*"executable":"\([^"]*\)".*/\1/p' | tail -n 1)
cp target/release/kvplan "$DIR/kvplan"
cp "$tests" "$DIR/exec-tests"
strip --strip-debug "$DIR/kvplan" "$DIR/exec-tests"
ls -la "$DIR"
