"""`probe pes`: the positional encodings, what each adds, and its options (from the registry)."""

from __future__ import annotations

import argparse
from typing import Any


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "pes",
        help="list the positional encodings and their options",
        description="List the positional encodings: what each adds to the model, whether it is relative "
        "(shift-invariant), its hook points, and the options `probe train -p KEY=VALUE` takes. The reading "
        "commands (eval, compare, ...) take them too, to read a trained model under another value (a RoPE "
        "scaling); refused there: those marked [training only] (a learned parameter's start, a kernel that "
        "gives the weights another meaning) and any that would change the weights' shapes.",
    )
    parser.add_argument("--json", action="store_true", help="print the list as JSON")
    parser.set_defaults(func=run)


def describe() -> list[dict[str, Any]]:
    """One entry per registered PE, in registry order."""
    from probe.models.registry import PE_CLASSES, PE_LABELS

    entries = []
    for kind, cls in PE_CLASSES.items():
        adds = [
            what
            for what, flag in (
                ("embedding", cls.adds_embedding),
                ("attention bias", cls.adds_bias),
                ("rotation", cls.rotates),
                ("query-dependent term", cls.scores_term),
            )
            if flag
        ]
        hooks = [
            hook
            for hook, flag in (
                ("hook_pos_embed", cls.adds_embedding),
                ("blocks.{l}.attn.hook_pos_bias", cls.adds_bias),
                ("blocks.{l}.attn.hook_rot_q/k", cls.rotates),
                ("blocks.{l}.attn.hook_pos_scores", cls.scores_term),
            )
            if flag
        ]
        entries.append(
            {
                "pe": kind,
                "label": PE_LABELS[kind],
                "relative": cls.relative,
                "adds": adds or ["nothing"],
                "hooks": hooks,
                "options": {
                    name: {
                        "type": option.type.__name__,
                        "default": option.default,
                        "choices": list(option.choices) if option.choices else None,
                        "help": option.help,
                        "at_inference": option.at_inference,
                    }
                    for name, option in cls.options.items()
                },
            }
        )
    return entries


def run(args: argparse.Namespace) -> int:
    from probe.commands.common import console, print_json
    from probe.models.positional import format_option

    entries = describe()
    if args.json:
        print_json(entries)
        return 0
    out = console()
    for entry in entries:
        kind = "relative" if entry["relative"] else "absolute"
        out.print(
            f"[bold]{entry['pe']}[/bold]  {entry['label']} ({kind}; adds {', '.join(entry['adds'])})", highlight=False
        )
        if entry["hooks"]:
            out.print(f"    hooks: {', '.join(entry['hooks'])}", highlight=False)
        for name, option in entry["options"].items():
            choices = f" ({', '.join(map(format_option, option['choices']))})" if option["choices"] else ""
            fixed = "" if option["at_inference"] else " [training only]"
            default = format_option(option["default"])
            out.print(f"    -p {name}={default}{choices}  {option['help']}{fixed}", highlight=False, markup=False)
    return 0
