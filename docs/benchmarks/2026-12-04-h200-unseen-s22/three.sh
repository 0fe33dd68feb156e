#!/usr/bin/env bash
for i in 0 1 2; do taskset -c $((4+2*i)),$((5+2*i)) python3 .devrun/unseen3.py 6 & done; wait
