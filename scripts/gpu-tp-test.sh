#!/usr/bin/env bash
# On a GPU machine with several GPUs: builds the parallel runtime's targets, runs the NCCL, peer,
# tensor-, context- and data-parallel GPU tests (their `separate` and `_ep` cases are the DCP, PCP
# and DP groups and expert parallelism across GPUs; each binary under a time limit, so a hung
# collective cannot eat the run), then emulates two nodes with two processes of one GPU each (--nnodes 2, NCCL over
# sockets only, as between hosts) and checks that the canary's greedy answer equals TP = 1's,
# then times the batch-1 decode step of a real shape at TP = 1 and TP = N with
# `tachyon bench latency`, writing OUT_DIR/tp<N>.json.
#   scripts/gpu-tp-test.sh OUT_DIR [TP (default: every GPU)] [PRESET (default llama-3.1-8b)] [ARCH (default llama)]
# Needs .deps/ carried (scripts/gpu-machine-deps.sh fetch). Multicast stays off (docs/parallelism.md).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT_DIR=${1:?usage: scripts/gpu-tp-test.sh OUT_DIR [TP] [PRESET]}
TP=${2:-$(nvidia-smi -L | wc -l)}
PRESET=${3:-llama-3.1-8b}
ARCH=${4:-llama}
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export XDG_CACHE_HOME=${XDG_CACHE_HOME:-/tmp/tachyon-cache}
mkdir -p "$OUT_DIR"
scripts/gpu-machine-deps.sh install > /dev/null
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTACHYON_CUDA=ON > "$OUT_DIR/configure.log" 2>&1
cmake --build build-gpu -j "$(nproc)" --target tachyon_cli gpu_nccl_communicator gpu_peer_communicator \
  gpu_tp_cuda_runner gpu_pcp_cuda_runner gpu_dp_cuda_runner > "$OUT_DIR/build.log" 2>&1 \
  || { tail -30 "$OUT_DIR/build.log"; exit 1; }
echo "== build: ok, $(nvidia-smi -L | wc -l) GPUs"

status=0
for test in nccl_communicator peer_communicator tp_cuda_runner pcp_cuda_runner dp_cuda_runner; do
  timeout 480 "build-gpu/tests/gpu_$test" > "$OUT_DIR/$test.log" 2>&1
  rc=$?
  [ $rc = 0 ] || status=1
  echo "== gpu.$test: rc $rc, $(grep -c '^\[       OK \]' "$OUT_DIR/$test.log") ok," \
    "$(grep -c '^\[  FAILED  \]' "$OUT_DIR/$test.log") failed, $(grep -c '^\[  SKIPPED \]' "$OUT_DIR/$test.log") skipped"
  grep -E "^\[  FAILED  \]|peer collective|Failure" "$OUT_DIR/$test.log" | head -10
done

# Two "nodes" on this host: node 1 (GPU 1) follows node 0 (GPU 0), which runs generate.
prompt="Zoe has 40 cookies. She gives away 12 cookies. The number of cookies she has doubles. How many cookies does Zoe have now?"
run_generate() { build-gpu/bin/tachyon generate --device cuda --chat --stop '\n\n' --max-tokens 64 --prompt "$prompt" "$@"; }
run_generate --tp 1 > "$OUT_DIR/generate-tp1.txt" 2> "$OUT_DIR/generate-tp1.log"
nodes=(--tp 2 --nnodes 2 --master-addr 127.0.0.1 --master-port 29611)
(export NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_IB_DISABLE=1 NCCL_SOCKET_IFNAME=lo
 CUDA_VISIBLE_DEVICES=1 timeout 120 bash -c "$(declare -f run_generate); prompt='$prompt'; run_generate ${nodes[*]} --node-rank 1" \
   > "$OUT_DIR/node1.txt" 2> "$OUT_DIR/node1.log" &
 follower=$!
 CUDA_VISIBLE_DEVICES=0 timeout 120 bash -c "$(declare -f run_generate); prompt='$prompt'; run_generate ${nodes[*]} --node-rank 0" \
   > "$OUT_DIR/generate-nodes2.txt" 2> "$OUT_DIR/node0.log"
 echo "node 0 rc $?"; wait $follower; echo "node 1 rc $?")
if cmp -s "$OUT_DIR/generate-tp1.txt" "$OUT_DIR/generate-nodes2.txt" && [ -s "$OUT_DIR/generate-tp1.txt" ]; then
  echo "== two nodes (TP = 2): the same answer as TP = 1"
else
  echo "== two nodes (TP = 2): DIFFERENT from TP = 1"; status=1
  tail -5 "$OUT_DIR/node0.log" "$OUT_DIR/node1.log"
fi
cat "$OUT_DIR/generate-nodes2.txt"

model=/tmp/tachyon-tp-models/$PRESET
[ -f "$model/config.json" ] || build-gpu/bin/tachyon make-model --arch "$ARCH" --preset "$PRESET" --seed 0 --out "$model" > /dev/null
for tp in 1 "$TP"; do
  timeout 200 build-gpu/bin/tachyon bench latency "$model" --device cuda --tp "$tp" --batch-size 1 --input-len 128 \
    --output-len 128 --num-iters 3 --num-iters-warmup 1 --output-json "$OUT_DIR/tp$tp.json" > "$OUT_DIR/bench-tp$tp.log" 2>&1 \
    || { echo "bench --tp $tp failed:"; tail -5 "$OUT_DIR/bench-tp$tp.log"; status=1; }
  echo "-- tp $tp:"; grep -E '"(decode_step_ms_median|decode_step_device_ms_median|decode_step_floor_ms|prefill_ms_median)"' "$OUT_DIR/bench-tp$tp.log"
done
exit $status
