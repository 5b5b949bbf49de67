// SPDX-License-Identifier: MIT
pragma solidity 0.8.28;

/// A minimal ERC-1271 smart wallet for walletgate's settlement tests: it
/// approves a digest its owner signed (65-byte r, s, v), unless it was
/// deployed to refuse everything.
contract Erc1271Wallet {
    bytes4 private constant MAGIC = 0x1626ba7e;
    bytes4 private constant REFUSED = 0xffffffff;

    address public immutable owner;
    bool public immutable refuses;

    constructor(address owner_, bool refuses_) {
        owner = owner_;
        refuses = refuses_;
    }

    function isValidSignature(bytes32 digest, bytes calldata signature) external view returns (bytes4) {
        if (refuses || signature.length != 65) {
            return REFUSED;
        }
        bytes32 r = bytes32(signature[0:32]);
        bytes32 s = bytes32(signature[32:64]);
        uint8 v = uint8(signature[64]);
        return ecrecover(digest, v, r, s) == owner ? MAGIC : REFUSED;
    }
}
