"""Evaluations: each module here defines `add_parser(subparsers)` and is listed in cli.EVAL_MODULES."""
