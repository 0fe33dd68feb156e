# Does CUDA_MPS_ACTIVE_THREAD_PERCENTAGE slow a compute-bound kernel? Two copies at once (is the
# kernel compute-bound?), a 50 %-limited spinner beside a latency probe, 30 % beside a full copy,
# and the daemon-wide default. Evidence for docs/isolation-report.md; run on the GPU host.
set -u
T=build/gpu/cmd/tessera/tessera
cmake --build build/gpu -j16 --target tessera >/dev/null 2>&1
export CUDA_VISIBLE_DEVICES=0
D=$(mktemp -d); export CUDA_MPS_PIPE_DIRECTORY=$D/p CUDA_MPS_LOG_DIRECTORY=$D/l; mkdir -p $D/p $D/l
nvidia-cuda-mps-control -d; sleep 0.5
echo "mps two burns at once: $( (echo | $T doctor-worker burn 1500 | tr '\n' ' ') & (echo | $T doctor-worker burn 1500 | tr '\n' ' '); wait)"
(sleep 3) | CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=50 $T doctor-worker spin > $D/spin.out & sleep 1
echo "probe beside 50% spinner: $(echo | timeout 4 $T doctor-worker probe 100 | tr '\n' ' ')"; wait; echo "spinner said: $(cat $D/spin.out | tr '\n' ' ')"
echo "30% burn while a full burn runs: $( (echo | $T doctor-worker burn 1500 | tr '\n' ' ') & (echo | CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=30 $T doctor-worker burn 1500 | tr '\n' ' '); wait)"
echo quit | nvidia-cuda-mps-control; sleep 1
nvidia-cuda-mps-control -d; sleep 0.3; echo "set_default_active_thread_percentage 30" | nvidia-cuda-mps-control
echo "default 30% burn: $(echo | $T doctor-worker burn 1000 | tr '\n' ' ')"
echo quit | nvidia-cuda-mps-control; sleep 1
grep -i "percent\|thread" $D/l/*.log | tail -5
