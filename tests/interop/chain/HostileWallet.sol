// SPDX-License-Identifier: MIT
pragma solidity 0.8.28;

/// An ERC-1271 wallet that attacks a settler, for walletgate's settlement
/// tests: it approves its owner's signatures (65-byte r, s, v) like
/// Erc1271Wallet, but
/// - mode 1 (`LOOPS`) first burns gas in a loop, so the settlement
///   transaction costs whatever gas it is given;
/// - mode 2 (`FREE_GAS_ONLY`) approves only when `GASPRICE` is 0: a
///   simulation without fees passes, the mined transaction reverts.
contract HostileWallet {
    bytes4 private constant MAGIC = 0x1626ba7e;
    bytes4 private constant REFUSED = 0xffffffff;
    uint8 public constant LOOPS = 1;
    uint8 public constant FREE_GAS_ONLY = 2;

    address public immutable owner;
    uint8 public immutable mode;

    constructor(address owner_, uint8 mode_) {
        owner = owner_;
        mode = mode_;
    }

    function isValidSignature(bytes32 digest, bytes calldata signature) external view returns (bytes4) {
        if (mode == LOOPS) {
            bytes32 burned = digest;
            for (uint256 i = 0; i < 1_000_000; i++) {
                burned = keccak256(abi.encode(burned, i));
            }
            if (burned == bytes32(0)) {
                return REFUSED;
            }
        }
        if (mode == FREE_GAS_ONLY && tx.gasprice != 0) {
            return REFUSED;
        }
        if (signature.length != 65) {
            return REFUSED;
        }
        bytes32 r = bytes32(signature[0:32]);
        bytes32 s = bytes32(signature[32:64]);
        uint8 v = uint8(signature[64]);
        return ecrecover(digest, v, r, s) == owner ? MAGIC : REFUSED;
    }
}
