#!/usr/bin/env bash
# On a lent machine with several GPUs, one lease: build the spillway binary,
# then (1) train the default tiny model on one GPU and, with the same global
# micro-batches, on NPROC GPUs (default 2) through NCCL, and compare their
# losses and final weights; (2) time the 1B step on one GPU and on NPROC
# (seq 4096, batch 4 per micro-batch, GRAD_ACCUM micro-batches an optimizer
# step over all ranks) for data parallelism's scaling. Logs go to $OUT.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/out}
NPROC=${NPROC:-2}
N=/opt/torch/.venv/lib/python3.12/site-packages/nvidia
export LD_LIBRARY_PATH=$N/cudnn/lib:$N/nccl/lib:$N/cu13/lib:/tmp/spillway-deps/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
# NVLink multicast stays off: it can take a shared host's GPUs out of service.
export NCCL_NVLS_ENABLE=0
start=$(date +%s)
[ "${BUILD:-1}" = 0 ] || scripts/gpu_build.sh spillway > "$OUT/build.log" 2>&1 || { tail -40 "$OUT/build.log"; exit 1; }
echo "build: $(( $(date +%s) - start )) s"
B=build/gpu/src/spillway
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | head -"$NPROC"

# The lent machines lack the fortunes corpus: sentences from a small grammar.
corpus=/tmp/spillway-dp-corpus.txt
python3 - $corpus <<'PY'
import random, sys
random.seed(7)
s = ["the cat", "a dog", "my friend", "the old man", "every child", "the river", "a quiet town", "her brother"]
v = ["sees", "likes", "follows", "finds", "remembers", "carries", "paints", "forgets"]
o = ["the moon", "a red ball", "the small house", "her song", "the long road", "an open door", "the last train"]
with open(sys.argv[1], "w") as f:
    for _ in range(40000):
        f.write(" ".join(f"{random.choice(s).capitalize()} {random.choice(v)} {random.choice(o)}." for _ in range(random.randint(1, 4))) + "\n%\n")
PY
data="--data $corpus --separator %"
tiny="$data --steps 30 --grad-accum 4 --eval-every 10 --checkpoint-every 30 --sample-tokens 0 --quiet"
# Runs live in /tmp (checkpoints stay there); their logs are copied to $OUT.
runs=/tmp/spillway-dp && rm -rf $runs && mkdir -p $runs
$B train $tiny --out $runs/tiny1 > "$OUT/tiny1.log" 2>&1 || { tail -5 "$OUT/tiny1.log"; exit 1; }
$B train $tiny --out $runs/tiny$NPROC --nproc-per-node "$NPROC" > "$OUT/tiny$NPROC.log" 2>&1 || { tail -5 "$OUT/tiny$NPROC.log"; exit 1; }
/opt/torch/.venv/bin/python - $runs/tiny1 $runs/tiny$NPROC <<'PY'
import json, sys
from safetensors.numpy import load_file
def losses(run): return [j["loss"] for j in map(json.loads, open(run + "/train_log.jsonl")) if "loss" in j]
a, b = losses(sys.argv[1]), losses(sys.argv[2])
print("tiny: %d steps, loss %.5f vs %.5f, largest step-loss difference %.2e" % (len(a), a[-1], b[-1], max(abs(x - y) for x, y in zip(a, b))))
wa, wb = (load_file(r + "/step-0000030/model.safetensors") for r in sys.argv[1:3])
print("tiny: largest weight difference %.2e" % max(float(abs(wa[k].astype("float32") - wb[k].astype("float32")).max()) for k in wa))
PY
echo "tiny: $(( $(date +%s) - start )) s"

[ "${BIG:-1}" = 0 ] && exit 0
# The 1B model from scratch on that corpus: tok/s of steps 3.. from the log.
big="$data --config llama3.2-1b --seq 4096 --batch 4 --grad-accum ${GRAD_ACCUM:-8} --steps ${STEPS:-8} --eval-every 0 --checkpoint-every 0 --sample-tokens 0 --quiet"
for n in 1 "$NPROC"; do
  extra=""; [ "$n" = 1 ] || extra="--nproc-per-node $n"
  $B train $big $extra --out $runs/big$n > "$OUT/big$n.log" 2>&1 || { tail -5 "$OUT/big$n.log"; exit 1; }
  cp $runs/big$n/train_log.jsonl "$OUT/big$n.jsonl"
  python3 - $runs/big$n "$n" <<'PY'
import json, sys
steps = [j for j in map(json.loads, open(sys.argv[1] + "/train_log.jsonl")) if "loss" in j]
first, last = steps[1], steps[-1]
s = (last["elapsed_s"] - first["elapsed_s"]) / (last["step"] - first["step"])
tok = (last["tokens"] - first["tokens"]) / (last["elapsed_s"] - first["elapsed_s"])
print("1B, %s GPU(s): %.3f s an optimizer step, %.0f tok/s, loss %.4f" % (sys.argv[2], s, tok, last["loss"]))
PY
  grep -E "done:" "$OUT/big$n.log"
  echo "big$n: $(( $(date +%s) - start )) s"
done
