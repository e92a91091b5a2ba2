#!/usr/bin/env bash
# Data parallelism with the state sharded (--shard optimizer, gradients,
# weights: ZeRO-1/2/3) against replication (--shard none) and one GPU, on a
# lent machine with NPROC GPUs (default 2), in one lease. Phases, named as
# arguments:
#   tiny:  the default tiny model trained 30 steps on 1 GPU and on NPROC, each
#          way; losses, final weights and AdamW moments compared
#   1b:    `spillway bench` of the 1B step (seq 4096, batch 4, 8 micro-batches
#          a step over all ranks) on 1 GPU and on NPROC both ways
#   weak:  the 1B step with 8 micro-batches per rank (grad-accum 8 x NPROC):
#          each GPU does the one-GPU run's work, as DDP scaling is usually
#          measured; beside 1b's fixed global step
#   profile: the 1B step on NPROC GPUs (1b's shape), sharded, with per-op
#          times and the measured per-stream timeline ($OUT/1b-profile.svg)
#   8b:    the same for LLaMA-3-8B at seq 8192 (the planner picks the layout)
#   zero:  LLaMA-3-8B at seq 8192 on NPROC GPUs sharded each way the planner
#          can keep on the devices (ZeRO-1, 2, 3)
#   large: LLaMA-2-13B's shape at seq 4096 on NPROC GPUs, --shard weights
#   largest: the most layers of LLaMA-3-8B's width (seq 8192, fp32 masters
#          and moments, layers recomputed) that `plan --largest` says fit
#          the NPROC GPUs, trained; then PyTorch FSDP2 in the same terms,
#          from that many layers down (3/4, 1/2; 150 s each) until one trains
#   torch: PyTorch FSDP2 (eager) on the 8B shape, NPROC GPUs
#   ddp:   PyTorch DDP (torch.compile) on the 1B shape, 1 GPU and NPROC, 8
#          micro-batches per rank (as weak)
#   net:   the tiny model sharded over NPROC GPUs with NCCL's peer-to-peer and
#          shared-memory transports off (its network transport, as between
#          hosts), against the same run over NVLink
#   links: `spillway bench --collectives` over NPROC GPUs: the link rate
#          each collective reaches, and the one the planner takes
#   resume: the tiny model on 1 GPU, the state on the device and at home
#          (--offload on): 30 steps straight against 15, stopped, and
#          resumed; checkpoints compared byte for byte
#   layouts: LLaMA-3-8B at seq 8192 on NPROC (4) GPUs laid out dp4, tp2 x dp2,
#          pp2 x dp2 and as the planner chooses (no degree given), each with
#          its predicted step (issue 22's table)
#   long:  LLaMA-3-8B at seq 131,072 over cp NPROC (atomic attention: the
#          ordered backward's workspace is queries x keys), recomputation
#          chosen by the planner and layers recomputed
#   longprofile: the same, layers recomputed, with every rank's op times
#   torchtp: PyTorch's tensor parallelism on the 8B shape over NPROC GPUs
#   torchcp: PyTorch's context parallelism (ring attention, FSDP2, fp32
#          masters) at long's shape, every activation kept and then every
#          block recomputed (240 s each)
#   tests: every gpu-labelled test (the build then builds them all)
# Results: JSON lines in $OUT/results.jsonl, logs beside them.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/out}
NPROC=${NPROC:-2}
. bench/gpu_env.sh
# NVLink multicast stays off: it can take a shared host's GPUs out of service.
export NCCL_NVLS_ENABLE=0
start=$(date +%s)
target=spillway; [[ " $* " == *" tests "* ]] && target=""
[ "${BUILD:-1}" = 0 ] || scripts/gpu_build.sh $target > "$OUT/build.log" 2>&1 || { tail -40 "$OUT/build.log"; exit 1; }
echo "build: $(( $(date +%s) - start )) s"
B=build/gpu/src/spillway
PY=/opt/torch/.venv/bin/python
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | head -"$NPROC"
runs=/tmp/spillway-shard && mkdir -p $runs
touch "$OUT/results.jsonl"

corpus=/tmp/spillway-dp-corpus.txt
tiny="--data $corpus --separator % --steps 30 --grad-accum 4 --eval-every 10 --checkpoint-every 30 --sample-tokens 0 --quiet"

make_corpus() {
  $PY - $corpus <<'PY'
import random, sys
random.seed(7)
s = ["the cat", "a dog", "my friend", "the old man", "every child", "the river", "a quiet town", "her brother"]
v = ["sees", "likes", "follows", "finds", "remembers", "carries", "paints", "forgets"]
o = ["the moon", "a red ball", "the small house", "her song", "the long road", "an open door", "the last train"]
with open(sys.argv[1], "w") as f:
    for _ in range(40000):
        f.write(" ".join(f"{random.choice(s).capitalize()} {random.choice(v)} {random.choice(o)}." for _ in range(random.randint(1, 4))) + "\n%\n")
PY
}

phase_tiny() {
  make_corpus
  rm -rf $runs/tiny*
  $B train $tiny --out $runs/tiny1 > "$OUT/tiny1.log" 2>&1 || { tail -5 "$OUT/tiny1.log"; return 1; }
  for shard in none optimizer gradients weights; do
    $B train $tiny --out $runs/tiny-$shard --nproc-per-node $NPROC --shard $shard > "$OUT/tiny-$shard.log" 2>&1 ||
      { tail -5 "$OUT/tiny-$shard.log"; return 1; }
    grep -m1 "^device:" "$OUT/tiny-$shard.log"
  done
  $PY - $runs <<'PY'
import json, sys
from safetensors.numpy import load_file
runs = sys.argv[1]
def losses(run): return [j["loss"] for j in map(json.loads, open(f"{runs}/{run}/train_log.jsonl")) if "loss" in j]
def load(run, f): return load_file(f"{runs}/{run}/step-0000030/{f}.safetensors")
def diff(a, b): return max(float(abs(a[k].astype("float32") - b[k].astype("float32")).max()) for k in a)
for a, b in [("tiny1", "tiny-none"), ("tiny1", "tiny-optimizer"), ("tiny-none", "tiny-optimizer"),
             ("tiny-none", "tiny-gradients"), ("tiny-none", "tiny-weights")]:
    la, lb = losses(a), losses(b)
    print("%s vs %s: loss %.5f vs %.5f, largest step-loss difference %.2e, weights %.2e, AdamW state %.2e" % (
        a, b, la[-1], lb[-1], max(abs(x - y) for x, y in zip(la, lb)), diff(load(a, "model"), load(b, "model")),
        diff(load(a, "optimizer"), load(b, "optimizer"))))
PY
}

# bench NAME GPUS SHARD ARGS...: one `spillway bench` run, its JSON line kept.
bench() {
  local name=$1 n=$2 shard=$3; shift 3
  local par=""; [ "$n" = 1 ] || par="--nproc-per-node $n --shard $shard"
  $B bench "$@" $par --json $runs/$name.json > "$OUT/$name.log" 2>&1 || { tail -5 "$OUT/$name.log"; return 0; }
  grep -E "^bench:|^start-up|median|planned" "$OUT/$name.log"
  $PY - $runs/$name.json "$name" "$OUT/results.jsonl" <<'PY'
import json, sys
r = json.loads(open(sys.argv[1]).read().splitlines()[-1])
r["name"] = sys.argv[2]
base = sys.argv[2].rsplit("-", 2)[0] + "-1gpu"
one = [x for x in map(json.loads, open(sys.argv[3])) if x.get("name") == base] if r["gpus"] > 1 else []
if one: r["scaling"] = round(r["tok_s_per_gpu"] / one[-1]["tok_s_per_gpu"], 4)
open(sys.argv[3], "a").write(json.dumps(r) + "\n")
print(json.dumps({k: r.get(k) for k in ("name", "gpus", "tok_s", "tok_s_per_gpu", "mfu", "scaling", "predicted_step_s", "step_s", "peak_device_bytes")}))
PY
}

phase_1b() {
  local a="--config llama3.2-1b --seq 4096 --batch 4 --grad-accum 8 --steps 5 --warmup 2"
  bench 1b-1gpu 1 none $a
  bench 1b-$NPROC-none $NPROC none $a
  bench 1b-$NPROC-optimizer $NPROC optimizer $a
}

phase_weak() {
  local a="--config llama3.2-1b --seq 4096 --batch 4 --grad-accum $(( 8 * NPROC )) --steps 5 --warmup 2"
  bench 1b-weak-1gpu 1 none --config llama3.2-1b --seq 4096 --batch 4 --grad-accum 8 --steps 5 --warmup 2
  bench 1b-weak-$NPROC-none $NPROC none $a
  bench 1b-weak-$NPROC-optimizer $NPROC optimizer $a
}

phase_profile() {
  $B bench --config llama3.2-1b --seq 4096 --batch 4 --grad-accum 8 --steps 3 --warmup 2 --nproc-per-node $NPROC \
    --shard optimizer --profile --timeline "$OUT/1b-profile.svg" > "$OUT/1b-profile.log" 2>&1 ||
    { tail -5 "$OUT/1b-profile.log"; return 0; }
  sed -n '/median/,$p' "$OUT/1b-profile.log" | head -60
}

phase_8b() {
  local a="--config llama3-8b --seq 8192 --batch 1 --grad-accum 8 --steps 3 --warmup 1 --recompute auto"
  bench 8b-1gpu 1 none $a
  bench 8b-$NPROC-auto $NPROC auto $a
}

phase_zero() {
  local a="--config llama3-8b --seq 8192 --batch 1 --grad-accum $(( 2 * NPROC )) --steps 3 --warmup 1"
  for shard in optimizer gradients weights; do bench 8b-zero-$NPROC-$shard $NPROC $shard $a; done
}

phase_large() {
  local a="--config llama2-13b --seq 4096 --batch 1 --grad-accum $(( 2 * NPROC )) --steps 3 --warmup 1 --recompute auto"
  $B plan $a --gpus $NPROC --shard weights 2>&1 | grep -E "^data parallel|^device|^predicted" | cut -c1-300
  bench 13b-$NPROC-weights $NPROC weights $a
}

phase_largest() {
  # The budgets the run's engine takes by default (90% of each GPU's free
  # memory, 90% of the host's available), given to the plan as well: the
  # plan's own defaults (80 GiB, 125 GiB) are another machine's.
  local free_mib avail_kib
  free_mib=$(nvidia-smi --query-gpu=memory.free --format=csv,noheader,nounits | head -1)
  avail_kib=$(awk '/MemAvailable/ {print $2}' /proc/meminfo)
  local a="--seq 8192 --batch 1 --grad-accum $(( 2 * NPROC )) --recompute layers"
  a="$a --device-mem $(( free_mib * 9 / 10 ))MiB --host-mem $(( avail_kib * 9 / 10 / 1024 ))MiB"
  local layers
  layers=$($B plan --config llama3-8b $a --gpus $NPROC --largest 2>&1 | grep -oE "with [0-9]+ layers" | grep -oE "[0-9]+")
  [ -n "$layers" ] || { echo "largest: no plan"; return 1; }
  $PY -c "
import json
json.dump(dict(architectures=['LlamaForCausalLM'], model_type='llama', hidden_size=4096, intermediate_size=14336,
               num_attention_heads=32, num_key_value_heads=8, num_hidden_layers=$layers, vocab_size=128256,
               rope_theta=500000.0, rms_norm_eps=1e-5, max_position_embeddings=8192, tie_word_embeddings=False,
               hidden_act='silu'), open('$runs/largest.json', 'w'))"
  echo "largest: $layers layers planned"
  bench largest-$NPROC-auto $NPROC auto --config $runs/largest.json $a --steps 2 --warmup 1
  # At most three layer counts, 150 s each, so the phase fits one 10-minute
  # call; LARGEST_TORCH=0 leaves PyTorch out (measured in an earlier lease).
  [ "${LARGEST_TORCH:-1}" = 1 ] || return 0
  for l in $layers $(( layers * 3 / 4 )) $(( layers / 2 )); do
    timeout 150 /opt/torch/.venv/bin/torchrun --standalone --nproc-per-node $NPROC bench/torch_data_parallel.py \
      --mode fsdp2 --shape llama3-8b --layers $l --fp32-master --recompute --seq 8192 --batch 1 --grad-accum 2 \
      --steps 2 > "$OUT/torch-largest-$l.log" 2>&1 && { grep "^{" "$OUT/torch-largest-$l.log" | tee -a "$OUT/results.jsonl"; break; }
    echo "pytorch fsdp2, $l layers: $(grep -m1 -oE "OutOfMemoryError|out of memory" "$OUT/torch-largest-$l.log" || tail -1 "$OUT/torch-largest-$l.log")"
  done
}

phase_ddp() {
  for n in 1 "$NPROC"; do
    /opt/torch/.venv/bin/torchrun --standalone --nproc-per-node $n bench/torch_data_parallel.py --mode ddp --compile \
      --grad-accum 8 > "$OUT/torch-ddp$n.log" 2>&1 || { tail -3 "$OUT/torch-ddp$n.log"; continue; }
    $PY - "$OUT/torch-ddp$n.log" "$OUT/results.jsonl" <<'PY'
import json, sys
r = json.loads([l for l in open(sys.argv[1]) if l.startswith("{")][-1])
one = [x for x in map(json.loads, open(sys.argv[2])) if x.get("system") == r["system"] and x["gpus"] == 1] if r["gpus"] > 1 else []
if one: r["scaling"] = round(r["tok_s_per_gpu"] / one[-1]["tok_s_per_gpu"], 4)
print(json.dumps(r))
open(sys.argv[2], "a").write(json.dumps(r) + "\n")
PY
  done
}

phase_net() {
  make_corpus
  rm -rf $runs/net-*
  $B train $tiny --out $runs/net-nvlink --nproc-per-node $NPROC --shard optimizer > "$OUT/net-nvlink.log" 2>&1 ||
    { tail -5 "$OUT/net-nvlink.log"; return 1; }
  NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_DEBUG=INFO $B train $tiny --out $runs/net-socket --nproc-per-node $NPROC \
    --shard optimizer > "$OUT/net-socket.log" 2>&1 || { tail -5 "$OUT/net-socket.log"; return 1; }
  echo "network transport: $(grep -m1 -oE 'via NET/[A-Za-z]+[^ ]*' "$OUT/net-socket.log" || echo 'no NET channel seen')"
  cmp $runs/net-nvlink/step-0000030/model.safetensors $runs/net-socket/step-0000030/model.safetensors &&
    echo "network transport: the same weights bit for bit as over NVLink"
  $PY -c "
import json
l = lambda r: [j['loss'] for j in map(json.loads, open('$runs/' + r + '/train_log.jsonl')) if 'loss' in j]
a, b = l('net-nvlink'), l('net-socket'); print('network transport: %d steps, losses equal: %s' % (len(a), a == b))"
}

phase_resume() {
  make_corpus
  for offload in off on; do
    rm -rf $runs/resume-*
    local r="$tiny --offload $offload"
    $B train $r --out $runs/resume-straight > "$OUT/resume-$offload.log" 2>&1 &&
      $B train $r --out $runs/resume-split --stop-after 15 >> "$OUT/resume-$offload.log" 2>&1 &&
      $B train $r --out $runs/resume-split --resume >> "$OUT/resume-$offload.log" 2>&1 ||
      { tail -5 "$OUT/resume-$offload.log"; return 1; }
    for f in model optimizer; do
      cmp -s $runs/resume-straight/step-0000030/$f.safetensors $runs/resume-split/step-0000030/$f.safetensors &&
        echo "resume (--offload $offload): $f.safetensors the same bytes" ||
        echo "resume (--offload $offload): $f.safetensors DIFFERS"
    done
  done
}

phase_layouts() {
  local a="--config llama3-8b --seq 8192 --batch 1 --grad-accum 8 --steps 3 --warmup 1"
  bench layouts-8b-dp$NPROC $NPROC auto $a --dp $NPROC
  bench layouts-8b-tp2 $NPROC auto $a --tp 2
  bench layouts-8b-pp2 $NPROC auto $a --pp 2
  bench layouts-8b-planner $NPROC auto $a
}

long_args="--config llama3-8b --seq 131072 --batch 1 --grad-accum 1 --cp $NPROC --nondeterministic"
phase_long() {
  bench long-8b-cp$NPROC $NPROC auto $long_args --steps 2 --warmup 1
  bench long-8b-cp$NPROC-layers $NPROC auto $long_args --steps 2 --warmup 1 --recompute layers
}

# Every rank's op times at 131,072 tokens (layers recomputed: the quick
# start-up): a collective that one rank waits in is another's slower work.
phase_longprofile() {
  $B bench $long_args --recompute layers --steps 1 --warmup 1 --profile --nproc-per-node $NPROC \
    > "$OUT/long-profile.log" 2>&1 || { tail -5 "$OUT/long-profile.log"; return 0; }
  grep -E "time by op|^  (attention|attention_backward|reduce_scatter|all_gather) |median|planned" "$OUT/long-profile.log"
}

phase_torchtp() {
  /opt/torch/.venv/bin/torchrun --standalone --nproc-per-node $NPROC bench/torch_tensor_parallel.py --shape llama3-8b \
    --seq 8192 --batch 1 --grad-accum 8 --steps 3 --recompute > "$OUT/torch-tp.log" 2>&1 ||
    { tail -3 "$OUT/torch-tp.log"; return 0; }
  grep "^{" "$OUT/torch-tp.log" | tee -a "$OUT/results.jsonl"
}

phase_torchcp() {
  local r
  for r in "" --recompute; do
    timeout 240 /opt/torch/.venv/bin/torchrun --standalone --nproc-per-node $NPROC bench/torch_context_parallel.py \
      --shape llama3-8b --seq 131072 --steps 1 $r > "$OUT/torch-cp$r.log" 2>&1
    grep "^{" "$OUT/torch-cp$r.log" | tee -a "$OUT/results.jsonl" | grep -q . ||
      echo "pytorch cp ${r:-(no recompute)}: $(grep -m1 -oE "OutOfMemoryError|out of memory" "$OUT/torch-cp$r.log" || tail -1 "$OUT/torch-cp$r.log")"
  done
}

phase_tests() {
  ctest --test-dir build/gpu -L gpu --output-on-failure --timeout 300 > "$OUT/gpu_tests.log" 2>&1
  grep -E "tests passed|tests failed|\(Failed\)|\*\*\*" "$OUT/gpu_tests.log"
  grep -E "data_parallel_cuda" "$OUT/gpu_tests.log" | head -3
}

phase_links() {
  $B bench --collectives --nproc-per-node $NPROC --json "$OUT/results.jsonl" > "$OUT/links.log" 2>&1 ||
    { tail -5 "$OUT/links.log"; return 1; }
  cat "$OUT/links.log"
}

phase_torch() {
  /opt/torch/.venv/bin/torchrun --standalone --nproc-per-node $NPROC bench/torch_data_parallel.py --mode fsdp2 \
    --shape llama3-8b --seq 8192 --batch 1 --grad-accum $(( 8 / NPROC )) --steps 3 > "$OUT/torch-fsdp2.log" 2>&1 ||
    { tail -3 "$OUT/torch-fsdp2.log"; return 0; }
  grep "^{" "$OUT/torch-fsdp2.log" | tee -a "$OUT/results.jsonl"
}

for phase in ${*:-tiny 1b}; do
  phase_$phase
  echo "$phase: $(( $(date +%s) - start )) s"
done
