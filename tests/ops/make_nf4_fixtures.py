#!/usr/bin/env python3
"""bitsandbytes' NF4 as the reference for spillway's (src/ops/nf4.h): writes
tests/ops/fixtures/nf4.safetensors, which tests/ops/nf4_test.cc compares
spillway's quantize and dequantize against bit for bit. The fixture is
committed; rerun this only to regenerate it.

Needs torch and bitsandbytes (its CPU path is enough; made with
bitsandbytes 0.50.2 on torch 2.15, CPU). From the repository root:

    python3 tests/ops/make_nf4_fixtures.py [OUT]

For each case NAME it stores, as bitsandbytes.functional.quantize_4bit(x,
blocksize=64, quant_type="nf4", compress_statistics=False) and
dequantize_4bit give them on the CPU:

  NAME.x        the input, float32, flattened
  NAME.packed   the packed bytes, one int32 per byte (safetensors' readers
                in spillway take no U8)
  NAME.absmax   the per-block scales, float32
  NAME.dequant  dequantize_4bit's output, float32

plus "nf4.code": bitsandbytes' 16 NF4 values (get_4bit_type("nf4")) and
"dynamic.code": its 8-bit dynamic map (create_dynamic_map()).

Double quantization (compress_statistics=True) of the DQ_CASES: the NF4
blocks' absmax, less their mean (the offset), quantized to 8 bits in blocks
of 256 over the dynamic map:

  NAME.offset       the offset, float32 [1]
  NAME.qabsmax      the absmax's 8-bit codes, one int32 each
  NAME.absmax2      the 256-blocks' scales, float32
  NAME.dq_absmax    the absmax as dequantized (dynamic code * absmax2 + offset)
  NAME.dq_dequant   dequantize_4bit's output over those
"""

import sys
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import save_file

import bitsandbytes
import bitsandbytes.functional as F

OUT = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parent / "fixtures" / "nf4.safetensors"
BLOCK = 64


def cases():
    g = torch.Generator().manual_seed(26)
    code = F.get_4bit_type("nf4", device="cpu").float()
    mids = (code[:-1] + code[1:]) / 2  # float32 midpoints, as bitsandbytes computes its bounds
    out = {}
    # Normal weights, several full blocks and a last partial one of odd length.
    out["normal"] = torch.randn(64 * 5 + 37, generator=g) * 0.02
    # A weight matrix's shape: blocks run over the flattened rows.
    out["matrix"] = torch.randn(48, 40, generator=g)
    # A block of zeros between two others.
    out["zeros"] = torch.cat([torch.randn(64, generator=g), torch.zeros(64), torch.randn(64, generator=g)])
    # Ties: values exactly halfway between two codes, in a block whose absmax
    # is 1 (so x / absmax is x), both in a full block (x * (1 / absmax)) and
    # in the last partial one (x / absmax); and just either side of them.
    below = torch.nextafter(mids, torch.full_like(mids, -2))
    above = torch.nextafter(mids, torch.full_like(mids, 2))
    full = torch.cat([torch.tensor([1.0]), mids, below, above, -mids, torch.tensor([-1.0, 0.0, -0.0])])
    full = torch.cat([full, torch.zeros(64 - full.numel())])
    out["ties"] = torch.cat([full, torch.tensor([1.0]), mids, below[:5]])
    # Ties in a block whose absmax is not 1: scaled by 0.5, still exact.
    out["ties_scaled"] = torch.cat([torch.tensor([0.5]), mids * 0.5, torch.zeros(64 - 16)])
    # Extremes: the block's own ±absmax, huge and tiny magnitudes, a block of
    # subnormals (absmax below bitsandbytes' 1e-38 floor), one lone value.
    out["extremes"] = torch.cat([
        torch.tensor([-3e38, 3e38, 1e-30, -1e-30] + [0.0] * 60),
        torch.tensor([-7.5, 7.5, 7.4999, -7.4999] + [1.0] * 60),
        torch.tensor([1e-40, -2e-40, 5e-41] + [0.0] * 61),
        torch.tensor([-0.25]),
    ])
    # NaN and infinity: what bitsandbytes' CPU path makes of them.
    out["nonfinite"] = torch.cat([
        torch.tensor([float("nan"), 1.0, -0.5] + [0.25] * 61),
        torch.tensor([float("inf"), 1.0, -0.5] + [0.25] * 61),
        torch.tensor([float("-inf"), 1.0, -0.5] + [0.25] * 61),
        torch.randn(64, generator=g),
    ])
    # Long enough for several threads' worth of blocks.
    out["large"] = torch.randn(64 * 300 + 10, generator=g)
    # Double quantization: blocks of very different scales (and a block of
    # zeros), and every block's absmax alike (the 8-bit blocks are all zero).
    scales = torch.exp(torch.randn(700, 1, generator=g) * 2)
    scales[17] = 0
    out["dq_wide"] = (torch.randn(700, 64, generator=g) * scales).reshape(-1)
    const = torch.randn(300, 64, generator=g).clamp(-0.9, 0.9)
    const[:, 5] = 1.0
    out["dq_constant"] = const.reshape(-1)
    return out, code


DQ_CASES = ["large", "dq_wide", "dq_constant"]


def main():
    tensors = {}
    data, code = cases()
    tensors["nf4.code"] = code.contiguous()
    for name, x in data.items():
        x = x.float().contiguous()
        packed, state = F.quantize_4bit(x, blocksize=BLOCK, quant_type="nf4", compress_statistics=False)
        deq = F.dequantize_4bit(packed, state)
        tensors[name + ".x"] = x.reshape(-1)
        tensors[name + ".packed"] = packed.reshape(-1).to(torch.int32)
        tensors[name + ".absmax"] = state.absmax.float().reshape(-1).contiguous()
        tensors[name + ".dequant"] = deq.float().reshape(-1).contiguous()
        if name not in DQ_CASES:
            continue
        packed2, s2 = F.quantize_4bit(x, blocksize=BLOCK, quant_type="nf4", compress_statistics=True)
        assert torch.equal(packed2, packed)
        tensors[name + ".offset"] = s2.offset.float().reshape(1).contiguous()
        tensors[name + ".qabsmax"] = s2.absmax.reshape(-1).to(torch.int32)
        tensors[name + ".absmax2"] = s2.state2.absmax.float().reshape(-1).contiguous()
        tensors[name + ".dq_absmax"] = (F.dequantize_blockwise(s2.absmax, s2.state2) + s2.offset).float()
        tensors[name + ".dq_dequant"] = F.dequantize_4bit(packed2, s2).float().reshape(-1).contiguous()
        tensors.setdefault("dynamic.code", s2.state2.code.float().contiguous())
    OUT.parent.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(OUT), metadata={"bitsandbytes": bitsandbytes.__version__, "torch": torch.__version__})
    print("wrote", OUT, "bitsandbytes", bitsandbytes.__version__)


if __name__ == "__main__":
    main()
