import os

from hypothesis import settings

# Property tests stay quick and deterministic in CI.
settings.register_profile("posenc", max_examples=40, deadline=None, derandomize=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "posenc"))
