#!/usr/bin/env bash
# What made resnet20_run{A,B,C}.*: ResNet-20 (jobs/resnet20_cifar.ini) on Fashion-MNIST, sync,
# 2 workers, 2 epochs (938 global steps), seed of the job file; decoded pixels (A) against the
# same images stored as JPEG quality 95 and decoded by dtrain: centre crop 28 of 28, i.e. the
# pixels as decoded (C), and --random-resized-crop 28 --random-flip with torchvision's default
# area range 8-100 % (B). Run from the repository root on the 2-core development VM (other
# builds and tests ran beside it). tests/benchmarks/encoded_accuracy.sh makes the same
# files and runs (one thread per rank, the default on this machine):
set -euo pipefail
EPOCHS=2 SCALE=0.08,1 OUT=/tmp/e2e bash tests/benchmarks/encoded_accuracy.sh decoded center rrc
