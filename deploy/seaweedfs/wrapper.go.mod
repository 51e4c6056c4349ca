// The wrapper module build-weed.sh builds weed in (see that script).
module spark.local/weedbuild

go 1.26.6

require github.com/seaweedfs/seaweedfs v0.0.0-20261109003541-7506e5f91cd6

replace github.com/tyler-smith/go-bip39 => github.com/cosmos/go-bip39 v1.0.0
