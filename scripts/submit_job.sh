#!/usr/bin/env bash
# Submit an msopt tuning to a running Ray cluster as a Ray job.
#
#   scripts/submit_job.sh [CONFIG] [more 'msopt optimize' arguments ...]
#
# CONFIG defaults to configs/quickstart.toml. The job's driver runs in the uploaded working
# directory, which Ray deletes later: pass '-o /a/shared/path' to keep the run directory.
# RAY_JOB_ADDRESS (default http://127.0.0.1:8265) is the cluster's dashboard address. A head
# started after a local ray.init may require token authentication (RAY_AUTH_MODE=token); the
# script sets it when a local token file exists.
set -euo pipefail
cd "$(dirname "$0")/.."
config=${1:-configs/quickstart.toml}
[ $# -gt 0 ] && shift
address=${RAY_JOB_ADDRESS:-http://127.0.0.1:8265}
# a local token (made by an earlier ray.init) means the head expects token authentication
if [ -z "${RAY_AUTH_MODE:-}" ] && [ -f "${RAY_AUTH_TOKEN_PATH:-$HOME/.ray/auth_token}" ]; then
    export RAY_AUTH_MODE=token
fi
# without this, `ray job submit` answers a missing dashboard with a ConnectionError traceback
if ! python - "$address" <<'PY'
import sys, urllib.error, urllib.request
try:
    urllib.request.urlopen(sys.argv[1].rstrip("/") + "/api/version", timeout=10).close()
except urllib.error.HTTPError:
    pass  # it answers (401 with token authentication): ray job submit takes it from here
except (OSError, ValueError) as exc:
    reason = getattr(exc, "reason", None) or exc
    print(f"submit_job.sh: no Ray dashboard answers at {sys.argv[1]} ({reason}); start the head with "
          "'ray start --head' or set RAY_JOB_ADDRESS to its dashboard (http://HEAD_IP:8265)", file=sys.stderr)
    sys.exit(2)
PY
then
    exit 2
fi
exec ray job submit --address "$address" --working-dir . -- \
    msopt optimize -c "$config" --address auto --plain "$@"
