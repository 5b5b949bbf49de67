# Sourced by the load scripts: the features the gateway example requires, read
# from Cargo.toml, so a new required feature never breaks their builds again.
gateway_features=$(python3 -c '
import tomllib
manifest = tomllib.load(open("Cargo.toml", "rb"))
example = next(e for e in manifest["example"] if e["name"] == "gateway")
print(",".join(example["required-features"]))
')
