"""The book's measured studies, one module per study.

Each module has ``PRESETS`` (``tiny`` for tests, ``ci`` for a chapter's live run, ``full`` for the
committed results, ``gpu`` for a CUDA device), ``next_run(config, runs) -> key or None`` (which run comes
next, given the runs done so far) and ``run(config, key, checkpoint_dir) -> dict``.
``posenc.experiments`` runs them from the command line and writes the JSON.
"""

from . import (context_extension, context_use, diagnostics, head_to_head, image_positions, length_generalisation,
               real_model, sink_control, streaming)

STUDIES = {"context_extension": context_extension, "context_use": context_use, "head_to_head": head_to_head,
           "length_generalisation": length_generalisation, "streaming": streaming,
           "image_positions": image_positions, "sink_control": sink_control, "diagnostics": diagnostics,
           "real_model": real_model}
