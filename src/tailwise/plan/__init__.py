"""Capacity plans from closed forms: the models behind ``tailwise plan``.

Each model function takes numbers in named units, checks them (a
:class:`BadInput` naming the CLI option on anything out of range) and returns
a :class:`Plan`: its inputs, its outputs and the assumptions the outputs rest
on. The closed forms themselves live in :mod:`tailwise.capacity`; this
package assembles them, one module per family:

* :mod:`~tailwise.plan.littles`: Little's law and fleet sizes by it
  (:func:`little`, :func:`replicas`);
* :mod:`~tailwise.plan.queueing`: M/M/1, M/M/c, M/G/1, M/G/c (Allen-Cunneen) and
  M/M/c/K queues (:func:`queue`);
* :mod:`~tailwise.plan.stages`: Amdahl's law and latency budgets (:func:`amdahl`);
* :mod:`~tailwise.plan.probability`: fan-out tails and availability
  (:func:`fanout`, :func:`availability`);
* :mod:`~tailwise.plan.pricing`: cost per unit of work (:func:`cost`);

with :mod:`~tailwise.plan.forms` for the option forms only ``plan`` uses
(lists, NAME=VALUE pairs, latency targets) and :mod:`~tailwise.plan.schema`
for the :class:`Plan` itself and its JSON document (``tailwise.plan/1``).
"""

from tailwise.plan.forms import (
    SLO_FORM,
    parse_latency_slo,
    parse_list,
    parse_offered_loads,
    parse_pairs,
    parse_positive,
    parse_speedup,
    parse_stages,
    parse_utilizations,
)
from tailwise.plan.littles import little, replicas
from tailwise.plan.pricing import HOURS_PER_MONTH, cost
from tailwise.plan.probability import HOURS_PER_YEAR, availability, fanout
from tailwise.plan.queueing import QUANTILES, queue
from tailwise.plan.schema import SCHEMA, Plan
from tailwise.plan.stages import amdahl

__all__ = [
    "HOURS_PER_MONTH",
    "HOURS_PER_YEAR",
    "QUANTILES",
    "SCHEMA",
    "SLO_FORM",
    "Plan",
    "amdahl",
    "availability",
    "cost",
    "fanout",
    "little",
    "parse_latency_slo",
    "parse_list",
    "parse_offered_loads",
    "parse_pairs",
    "parse_positive",
    "parse_speedup",
    "parse_stages",
    "parse_utilizations",
    "queue",
    "replicas",
]
