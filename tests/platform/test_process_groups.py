"""How a rank joins the job (a pure function, checked without GPUs or nodes): NCCL is bound to the rank's GPU,
the timeout is the run's flag, a plain process is a world of one, and no gloo groups are made."""

from __future__ import annotations

from datetime import timedelta

import torch

from megatron_crossbert.config import ParallelConfig
from megatron_crossbert.platform.distributed import process_group_args

LAUNCHED = {"RANK": "9", "LOCAL_RANK": "1", "WORLD_SIZE": "16", "MASTER_ADDR": "node0", "MASTER_PORT": "6000"}


def test_nccl_under_a_launcher_gets_the_local_gpu_as_device_id_and_the_flagged_timeout():
    plan = process_group_args(True, LAUNCHED, timeout_minutes=45)
    assert plan.backend == "nccl" and plan.local_rank == 1 and not plan.create_gloo_groups
    assert plan.init_kwargs == {"backend": "nccl", "timeout": timedelta(minutes=45),
                                "device_id": torch.device("cuda", 1)}  # env:// rendezvous: no init_method


def test_a_plain_cpu_process_is_a_gloo_world_of_one_on_the_loopback():
    plan = process_group_args(False, {}, timeout_minutes=30, port=12345)
    assert plan.local_rank is None and "device_id" not in plan.init_kwargs
    assert plan.init_kwargs == {"backend": "gloo", "timeout": timedelta(minutes=30),
                                "init_method": "tcp://127.0.0.1:12345", "rank": 0, "world_size": 1}


def test_the_timeout_is_a_config_field_with_megatron_lms_flag():
    from megatron_crossbert.cli.pretrain import build_parser

    assert ParallelConfig().distributed_timeout_minutes == 30
    args = build_parser().parse_args(["--distributed-timeout-minutes", "90"])
    assert any(value == 90 for value in vars(args).values())
