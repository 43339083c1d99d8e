#!/usr/bin/env bash
# The netns tier creates network namespaces and programs their kernels: it needs root.
# Under CI=true a tier that cannot run is a failure, never a skip.
if [ "$(id -u)" -ne 0 ]; then
	echo "the netns test tier needs root (it creates network namespaces); run make test as root" >&2
	exit 1
fi
