"""What every record of published GPU evidence holds (the latency corpus in ``analysis/catalog/latency/``, the
start-up corpus in ``tests/fixtures/gpu_corpus/``): where it was published, who ran what, the lines its numbers
come from verbatim, and what makes it unusual."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, HttpUrl


class PublishedRecord(BaseModel):
    """A measurement someone published from a real GPU machine, transcribed with its source."""

    model_config = ConfigDict(extra="forbid")

    source: HttpUrl = Field(description="the issue, pull request, file or page it was published in")
    description: str = Field(description="who ran what, in a line (from the source)")
    excerpt: str = Field(min_length=1, description="the lines the numbers come from, verbatim")
    notes: str = Field("", description="anything that makes it unusual (other load, patches, assumptions)")
