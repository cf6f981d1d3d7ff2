#!/usr/bin/env bash
# GPU smoke test for `kvscope probe` (not part of CI): start a tiny model under the probe, stop it
# once startup has settled, print the attachment report and the recorded timeline.
#
#   scripts/probe_gpu_smoke.sh sglang                       # Qwen/Qwen2.5-0.5B-Instruct, TP=1
#   TP=2 scripts/probe_gpu_smoke.sh vllm Qwen/Qwen3-0.6B
#
# Needs: a CUDA GPU, kvscope installed (pip install -e .), and the engine installed in the same
# Python (or on PATH). Output directory: $OUT (default: a fresh temp dir). Exit status: 0 when
# the engine started and every required hook target attached; 3 when a target was not found;
# 124 when the engine did not finish starting within --timeout. (No GPU? vLLM's CPU build runs the
# same probe for real in CI: .ci/tier_real_engine, docs/cpu.md.)
set -euo pipefail
ENGINE=${1:-sglang}
MODEL=${2:-Qwen/Qwen2.5-0.5B-Instruct}
TP=${TP:-1}
PORT=${PORT:-30123}
OUT=${OUT:-$(mktemp -d)/probe}

case "$ENGINE" in
  sglang) CMD=(python -m sglang.launch_server --model-path "$MODEL" --tp "$TP" --port "$PORT"
               --mem-fraction-static 0.5 --cuda-graph-max-bs 8) ;;
  vllm)   CMD=(vllm serve "$MODEL" -tp "$TP" --port "$PORT" --gpu-memory-utilization 0.5
               --max-model-len 4096) ;;
  *) echo "usage: $0 sglang|vllm [MODEL]" >&2; exit 2 ;;
esac

echo "+ kvscope probe --out $OUT --stop-after-startup -- ${CMD[*]}" >&2
set +e
kvscope probe --out "$OUT" --stop-after-startup --settle 5 --timeout 900 --strict -- "${CMD[@]}"
rc=$?
set -e
echo >&2
echo "records: $OUT" >&2
ls -1 "$OUT" >&2
python - "$OUT" <<'PY'
import json, sys
from kvscope.probe import timeline_from_probe_dir
tl = timeline_from_probe_dir(sys.argv[1]).to_dict()
tl.pop("probe", None)
print(json.dumps(tl, indent=1, default=str))
PY
# doctor on the probe directory: the same figures, plus a finding per hook that never attached/fired
kvscope doctor "$OUT" || true
exit $rc
