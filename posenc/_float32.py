"""Buffers that stay float32 when a model is cast to half precision.

``nn.Module.to(torch.bfloat16)`` and ``.half()`` round *every* floating buffer. For RoPE's ``inv_freq`` that
is the classic long-context bug (Hugging Face transformers issues #25681 and #29496): a bf16 frequency is
off by up to 0.4%, so the angle at position 8000 is off by radians, and casting back to float32 later
cannot recover the lost bits. Modules that derive from ``Float32Buffers`` list such buffers in
``float32_buffers``; those follow the module's device but never its dtype.
"""

from __future__ import annotations

from torch import nn


class Float32Buffers(nn.Module):
    """``nn.Module`` whose buffers named in ``float32_buffers`` keep their dtype through ``.to()``/``.half()``."""

    float32_buffers: tuple[str, ...] = ()

    def _apply(self, fn, recurse=True):
        # _apply replaces each buffer by fn(buffer); keep the originals and move them to the new device.
        kept = {name: self._buffers[name] for name in self.float32_buffers if self._buffers.get(name) is not None}
        super()._apply(fn, recurse)
        for name, original in kept.items():
            self._buffers[name] = original.to(self._buffers[name].device)
        return self
