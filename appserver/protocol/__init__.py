"""Wire protocol: pydantic models, error codes and the one method table.

Its modules do not use ``from __future__ import annotations``: pydantic
evaluates every field's annotation when a model class is made, and a string
annotation costs a ``compile`` and an ``eval`` each (~1,000 of them; the
package imported ~15 % faster without, some 14 ms of every start). A forward
reference is quoted where it is needed.
"""
