"""Service laws shared by the demo servers, the simulator and calibrate.

A law here is a model of how a serving engine spends its time: its
configuration and the cost of its unit of work. The demo server runs a law in
real time, the simulator replays it in virtual time, and calibrate fits its
numbers to measured runs; keeping it in one place is what stops the three from
drifting apart.

This package sits below the engines (``server``, ``sim``) and ``calibrate``:
it imports only foundation and model modules (errors, units, clock, records,
distributions, arrivals, metrics, capacity), never an engine.
"""
