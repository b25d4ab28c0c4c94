"""Every fault kind, declared once: typed parameters, bounds, layers, selectors.

The bottom of the house: both the orchestrator (activities, ``validate``, ``plan``, the
catalogue) and the node side (the agent's registry, the lab's and the host's backends)
read a kind from here and nothing else parses its parameters. It imports only
:mod:`gameday.errors` and :mod:`gameday.contract`.

- :mod:`gameday.kinds.params`: one parameter (:func:`param`, :func:`required`);
- :mod:`gameday.kinds.selectors`: the selectors a kind accepts;
- :mod:`gameday.kinds.spec`: :class:`KindSpec` (one kind) and :class:`KindParams`;
- one module per family: ``gpu``, ``net``, ``storage``, ``process``, ``node``,
  ``service``, ``k8s``;
- :mod:`gameday.kinds.catalogue`: every kind by name, :func:`parse`, :func:`register`;
  a family's module is imported when one of its kinds is first looked up.
"""

from gameday.kinds.catalogue import CATALOGUE, by_activity, lookup, parse, register
from gameday.kinds.params import Param, param, required
from gameday.kinds.selectors import Selector, SelectorKey
from gameday.kinds.spec import KindParams, KindSpec

__all__ = ["CATALOGUE", "KindParams", "KindSpec", "Param", "Selector", "SelectorKey",
           "by_activity", "lookup", "param", "parse", "register", "required"]
