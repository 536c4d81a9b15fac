#!/bin/sh
sleep 1000
