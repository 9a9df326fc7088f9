"""Reading Apptainer definition files the way Apptainer does, for tests that cannot run it.

spython parses definition files but silently drops sections it does not know (it kept none of
``%arguments``), so section names are checked here against Apptainer's own list.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

# Apptainer's parser (pkg/build/types/parser/deffile.go): validSections, then appSections.
SECTIONS = frozenset({"help", "setup", "files", "labels", "environment", "pre", "post",
                      "runscript", "test", "startscript", "arguments"})
APP_SECTIONS = frozenset({"appinstall", "applabels", "appfiles", "appenv", "apptest", "apphelp",
                          "apprun", "appstart"})
BUILD_ARG = re.compile(r"{{\s*(\w+)\s*}}")


@dataclass
class Stage:
    """One stage of a definition: its header keys and its sections (repeated ones appended)."""

    header: dict[str, str] = field(default_factory=dict)
    sections: dict[str, str] = field(default_factory=dict)
    names: list[str] = field(default_factory=list)  # every %name line, in order, with arguments

    def files(self) -> list[tuple[str, str]]:
        """(source, destination) of each ``%files`` line; no destination means the same path."""
        pairs = []
        for line in self.sections.get("files", "").splitlines():
            words = line.split()
            if words and not words[0].startswith("#"):
                pairs.append((words[0], words[1] if len(words) > 1 else words[0]))
        return pairs

    def arguments(self) -> dict[str, str]:
        """The build arguments' defaults, from ``%arguments`` lines ``NAME=value``."""
        found = {}
        for line in self.sections.get("arguments", "").splitlines():
            line = line.strip()
            if line and not line.startswith("#"):
                name, _, value = line.partition("=")
                found[name.strip()] = value.strip()
        return found


def parse(text: str) -> list[Stage]:
    """Split a definition into stages (a ``Bootstrap:`` line starts one) and their sections."""
    stages: list[Stage] = []
    current: Stage | None = None
    section: str | None = None
    for line in text.splitlines():
        if re.match(r"(?i)^bootstrap:", line):
            current, section = Stage(), None
            stages.append(current)
        if current is None:
            continue
        words = line.split()
        if words and words[0].startswith("%"):
            section = words[0][1:].lower()
            current.names.append(line.strip()[1:])
            current.sections.setdefault(section, "")
            continue
        if section is None:
            key, sep, value = line.partition(":")
            if sep and not line.lstrip().startswith("#"):
                current.header[key.strip().lower()] = value.strip()
        else:
            current.sections[section] += line + "\n"
    return stages


def unknown_sections(stages: list[Stage]) -> list[str]:
    """Section names Apptainer would refuse ("invalid section(s) specified")."""
    bad = []
    for stage in stages:
        for name in stage.sections:
            if name not in SECTIONS and name not in APP_SECTIONS:
                bad.append(name)
    return bad


def render(text: str, arguments: dict[str, str]) -> str:
    """Substitute ``{{ NAME }}`` as ``apptainer build`` does; KeyError for an undefined one."""
    return BUILD_ARG.sub(lambda m: arguments[m.group(1)], text)
