"""config.set_in_section: one key of overrides set or removed, every other line of the user's file kept."""

from __future__ import annotations

import pytest

from h3kit.core.errors import BadInput
from h3kit.data import config


@pytest.mark.parametrize("before, value, after", [
    ("# mine\noverrides:\n  steps: 7  # my steps\n  preset: quality  # was\n# tail\n", "fast",
     "# mine\noverrides:\n  steps: 7  # my steps\n  preset: fast  # was\n# tail\n"),
    ("overrides:\n    steps: 7\n\n# about the next section\nprofile: auto\n", "fast",
     "overrides:\n    steps: 7\n    preset: fast\n\n# about the next section\nprofile: auto\n"),
    ("overrides:\n  preset: fast\n  steps: 7\n", None, "overrides:\n  steps: 7\n"),
    ("profile: auto\n", "balanced", "profile: auto\noverrides:\n  preset: balanced\n"),
    ("profile: auto\noverrides: {}\n", "fast", "profile: auto\noverrides:\n  preset: fast\n"),
])
def test_one_key_changes_and_nothing_else(tmp_path, before, value, after):
    path = tmp_path / "config.yaml"
    path.write_text(before, encoding="utf-8")
    config.set_in_section(path, "overrides", "preset", value)
    assert path.read_text(encoding="utf-8") == after


def test_a_value_the_next_plan_would_refuse_is_not_written(tmp_path):
    path = tmp_path / "config.yaml"
    path.write_text("overrides:\n  steps: 7\n", encoding="utf-8")
    with pytest.raises(BadInput):
        config.set_in_section(path, "overrides", "preset", "turbo")
    assert path.read_text(encoding="utf-8") == "overrides:\n  steps: 7\n"
