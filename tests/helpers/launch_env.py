"""What torchrun and srun put in a training process's environment, for tests of the launch readers."""

from __future__ import annotations

# torchrun --nnodes=2 --nproc-per-node=2 --rdzv-id=job42: the second process of node 1.
TORCHRUN_NODE1 = {
    "RANK": "3",
    "LOCAL_RANK": "1",
    "GROUP_RANK": "1",
    "LOCAL_WORLD_SIZE": "2",
    "WORLD_SIZE": "4",
    "GROUP_WORLD_SIZE": "2",
    "MASTER_ADDR": "node0",
    "MASTER_PORT": "29500",
    "TORCHELASTIC_RUN_ID": "job42",
}
# srun with --nodes=2 --ntasks-per-node=4 in job 777: the second task of node 1.
SRUN_NODE1 = {
    "SLURM_NTASKS": "8",
    "SLURM_NNODES": "2",
    "SLURM_NTASKS_PER_NODE": "4(x2)",
    "SLURM_PROCID": "5",
    "SLURM_LOCALID": "1",
    "SLURM_NODEID": "1",
    "SLURM_JOB_ID": "777",
    "SLURM_STEP_ID": "0",
    "SLURM_JOB_NAME": "ocr-train",
    "SLURM_NODELIST": "gpu[01-02]",
}
