"""Print the plan's JSON Schema: ``python -m hoccl_compiler.schema_tool > hoccl_compiler/plan.schema.json``."""

from __future__ import annotations

import sys

from .schema import plan_json_schema

if __name__ == "__main__":
    sys.stdout.write(plan_json_schema())
