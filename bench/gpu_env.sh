# The lent GPU machine's runtime for spillway's binaries, sourced from the
# repository root by the bench scripts: cuDNN and NCCL from PyTorch's
# environment, the libraries scripts/gpu_build.sh unpacked, and NVLink
# multicast off in every process (it can take a shared host's GPUs out of
# service).
N=/opt/torch/.venv/lib/python3.12/site-packages/nvidia
export LD_LIBRARY_PATH=$N/cudnn/lib:$N/nccl/lib:$N/cu13/lib:/tmp/spillway-deps/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
export NCCL_NVLS_ENABLE=0
