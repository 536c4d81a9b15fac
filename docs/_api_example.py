from fleetctl import Fleet

fleet = Fleet.from_inventory("inventory.yaml")            # any source `fleetctl -i` takes
nodes = fleet.select("local")                             # Ansible patterns, node sets
result = nodes.run(["uname", "-r"], timeout=30)           # per host: rc, stdout, stderr, status
for host, r in result.items():
    print(host, r.status, r.rc, r.stdout.strip())
facts = nodes.facts().facts["localhost"]                  # typed facts, raw dict in .raw
print(facts.cores, "cores,", facts.memory_mib, "MiB, CUDA", facts.cuda_version)
plan = nodes.deploy("playbooks/verify.yaml", mode="plan")  # plan / dry_run / apply
print(plan.run_id, plan.summary())                        # every run is in `fleetctl runs`
