"""Every JSON object `kvprof plan` prints or writes, and the JSON Schema exported from their models.

- ``Plan`` (analysis.planning.plan_schema): `kvprof plan --json`, one configuration;
- ``ProcurementRow`` (analysis.planning.procurement): each element of `kvprof plan --json` with GPU or tp lists,
  or ``--concurrency``;
- ``Recommendation`` (analysis.planning.recommend): `kvprof recommend --json`;
- ``SavedPlan`` (analysis.planning.saved_plan): the file `kvprof plan --save` writes and `kvprof check-plan` reads;
- ``Calibration`` (analysis.planning.calibration): the calibration.json `kvprof report` writes and
  `kvprof plan --calibration` reads.

``plan.schema.json`` beside this file is the schema, regenerated with ``python -m analysis.planning.outputs``; a test
holds it to the models, and every docs example's ``--json`` output to it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from pydantic.json_schema import models_json_schema

from analysis.planning.calibration import Calibration
from analysis.planning.plan_schema import PLAN_VERSION, Plan
from analysis.planning.procurement import ProcurementRow
from analysis.planning.recommend import Recommendation
from analysis.planning.saved_plan import SavedPlan

SCHEMA_FILE = Path(__file__).with_name("plan.schema.json")
# What each output is, by the name its definition has in the schema's $defs.
OUTPUTS: dict[str, type[BaseModel]] = {"Plan": Plan, "ProcurementRow": ProcurementRow,
                                       "Recommendation": Recommendation, "SavedPlan": SavedPlan,
                                       "Calibration": Calibration}


def json_schema() -> dict[str, Any]:
    """One JSON Schema (draft 2020-12) whose $defs hold every output's model; ``definition(name)`` picks one."""
    _, schema = models_json_schema([(m, "serialization") for m in OUTPUTS.values()],
                                   ref_template="#/$defs/{model}")
    return {"$schema": "https://json-schema.org/draft/2020-12/schema",
            "title": f"kvprof plan outputs (plan version {PLAN_VERSION})",
            "description": __doc__.split("\n\n")[0], **schema}


def definition(name: str, schema: dict[str, Any] | None = None) -> dict[str, Any]:
    """A schema that validates one output (``name`` a key of OUTPUTS), its $defs kept for references."""
    schema = schema or json_schema()
    return {"$ref": f"#/$defs/{name}", "$defs": schema["$defs"]}


def json_schema_text() -> str:
    return json.dumps(json_schema(), indent=2, sort_keys=True, ensure_ascii=False) + "\n"


if __name__ == "__main__":
    SCHEMA_FILE.write_text(json_schema_text(), encoding="utf-8")
    print(f"wrote {SCHEMA_FILE}")
