"""bench/step_roofline.py's arithmetic and op timer, against products worked by hand."""

from __future__ import annotations

import pytest
import torch
from helpers import bench_script

roofline = bench_script("step_roofline")


@pytest.mark.parametrize(
    ("shapes", "flops"),
    [
        ([[760, 128], [128, 512]], 2 * 760 * 128 * 512),  # mm
        ([[512], [760, 128], [128, 512]], 2 * 760 * 128 * 512),  # addmm: the bias adds no product
        ([[8, 90, 32], [8, 32, 90]], 2 * 8 * 90 * 32 * 90),  # bmm
        ([[8, 90, 90], [8, 90, 32], [8, 32, 90]], 2 * 8 * 90 * 32 * 90),  # baddbmm
    ],
)
def test_product_flops(shapes, flops):
    assert roofline.product_flops(shapes) == flops


@pytest.mark.parametrize(
    ("op", "part"),
    [
        ("mm", "matmul"),
        ("baddbmm", "matmul"),
        ("_scaled_dot_product_flash_attention_for_cpu", "attention"),
        ("_scaled_dot_product_flash_attention_for_cpu_backward", "attention"),
        ("_fused_adam_", "optimizer"),
        ("_foreach_sqrt", "optimizer"),
        ("mul", "other"),
        ("matmul", "other"),  # it dispatches to mm/bmm, which count once
    ],
)
def test_kind(op, part):
    assert roofline.kind(op) == part


def test_op_timer_records_each_product_with_its_layout():
    a, b = torch.randn(64, 32), torch.randn(48, 32)
    with roofline.OpTimer() as timer:
        torch.mm(a, b.t())
        torch.mm(a, b.t())
        torch.relu(a)
    (product,) = timer.products.values()
    assert product["op"] == "mm"
    assert product["shapes"] == [[64, 32], [32, 48]]
    assert product["strides"] == [[32, 1], [1, 32]]  # b.t() as the product read it, not made contiguous
    assert product["calls"] == 2
    assert product["seconds"] > 0
    assert timer.others.keys() >= {"relu"}
    assert timer.parts["matmul"] == pytest.approx(product["seconds"])


def test_sgemm_seconds_runs_each_product_kind():
    for shapes in ([[16, 8], [8, 4]], [[4], [16, 8], [8, 4]], [[2, 16, 8], [2, 8, 4]]):
        strides = [list(torch.empty(shape).stride()) for shape in shapes]
        assert 0 < roofline.sgemm_seconds(shapes, strides, round_seconds=0.001) < 0.01
