"""The incident's host, as the seed tells it: eight 96 GiB GPUs, MiniMax-M2.5 served at
TP=8 by a ``Restart=always``, ``KillMode=process`` unit, a notebook on GPU 0, and the
models installed beside it (the next one, one too big); ``containers`` adds an embedding
container on GPU 7 and the reranker that fits where it is.

Names and sizes only: ``gpudash.demo.sim`` builds the host from them.
"""

from __future__ import annotations

from gpudash.demo.models import SimServer

GPU_NAME = "NVIDIA RTX PRO 6000 Blackwell"
GPU_TOTAL_MIB = 97887
MODEL_MIB = 96801  # per GPU, as nvidia-smi showed in the incident
NOTEBOOK_MIB = 2048
RESPAWN_MIB = 612  # a respawned worker's CUDA context, before it fails to load the model
MAX_DEMO_HOSTS = 256  # --demo-hosts: copies of the incident host in the demo fleet
MINIMAX = "vllm-minimax-m25.service"
KIMI = "vllm-kimi-k25.service"
DEEPSEEK = "vllm-deepseek-v3.service"
MINIMAX_SERVER = SimServer("MiniMaxAI/MiniMax-M2.5", 8000)
KIMI_SERVER = SimServer("moonshotai/Kimi-K2.5-INT4", 8001, load_s=20.0)
DEEPSEEK_SERVER = SimServer("deepseek-ai/DeepSeek-V3", 8002, gpu_memory_utilization=0.99)
HOST_CPUS = 128
HOST_MEM_MIB = 2063 * 1024  # 2 TiB of RAM, as a host of eight 96 GiB GPUs has
HOST_BASE_MIB = 41 * 1024  # the OS, page tables, the driver
# The container's successor, with ``containers``: a small reranker installed as a unit,
# one GPU, that fits in what the embedding container holds on GPU 7 (a swap from it).
RERANK = "vllm-rerank.service"
RERANK_SERVER = SimServer("BAAI/bge-reranker-v2-m3", 8003, tp=1, first_gpu=7,
                          gpu_memory_utilization=0.0106, load_s=6.0, shards=8)
SERVER_CMD = (
    "python3 -m vllm.entrypoints.openai.api_server --model MiniMaxAI/MiniMax-M2.5 "
    "--tensor-parallel-size 8 --enable-expert-parallel --port 8000"
)
