// SPDX-License-Identifier: MIT
pragma solidity 0.8.28;

// walletgate's own stand-in for x402's `x402UptoPermit2Proxy`, written from
// the documented ABI, errors and rules of the official contract (its
// selectors, error selectors and check order), for the test chain only. `deploy.mjs` puts its
// runtime code at the canonical address 0x4020A4f3b7b90ccA423B9fabCc0CE57C6C240002
// with `anvil_setCode`, so the constructor never runs: Permit2's address is a
// constant (baked into the runtime code) rather than a constructor immutable,
// and the reentrancy lock lives in transient storage (no initial value).
//
// Build: node tests/interop/chain/build-wallet.mjs (writes UptoPermit2Proxy.runtime.bin).

/// The part of Uniswap's Permit2 `ISignatureTransfer` this proxy calls.
interface ISignatureTransfer {
    struct TokenPermissions {
        address token;
        uint256 amount;
    }

    struct PermitTransferFrom {
        TokenPermissions permitted;
        uint256 nonce;
        uint256 deadline;
    }

    struct SignatureTransferDetails {
        address to;
        uint256 requestedAmount;
    }

    function permitWitnessTransferFrom(
        PermitTransferFrom calldata permit,
        SignatureTransferDetails calldata transferDetails,
        address owner,
        bytes32 witness,
        string calldata witnessTypeString,
        bytes calldata signature
    ) external;
}

/// EIP-2612's `permit`, tried by `settleWithPermit`.
interface IERC2612 {
    function permit(address owner, address spender, uint256 value, uint256 deadline, uint8 v, bytes32 r, bytes32 s)
        external;
}

contract UptoPermit2Proxy {
    /// Uniswap's Permit2, at its canonical address on every chain.
    ISignatureTransfer public constant PERMIT2 = ISignatureTransfer(0x000000000022D473030F116dDEE9F6B43aC78BA3);

    string public constant WITNESS_TYPE_STRING =
        "Witness witness)TokenPermissions(address token,uint256 amount)Witness(address to,address facilitator,uint256 validAfter)";

    bytes32 public constant WITNESS_TYPEHASH = keccak256("Witness(address to,address facilitator,uint256 validAfter)");

    /// What the payer signed beside the permit: who is paid, who may settle, from when.
    struct Witness {
        address to;
        address facilitator;
        uint256 validAfter;
    }

    /// An EIP-2612 permit of the token to Permit2, for a payer without a Permit2 allowance yet.
    struct EIP2612Permit {
        uint256 value;
        uint256 deadline;
        bytes32 r;
        bytes32 s;
        uint8 v;
    }

    event Settled();
    event SettledWithPermit();
    event EIP2612PermitFailedWithReason(string reason);
    event EIP2612PermitFailedWithPanic(uint256 errorCode);
    event EIP2612PermitFailedWithData(bytes data);

    error AmountExceedsPermitted();
    error UnauthorizedFacilitator();
    error InvalidAmount();
    error InvalidOwner();
    error InvalidDestination();
    error PaymentTooEarly();
    error Permit2612AmountMismatch();
    error ReentrancyGuardReentrantCall();

    // A transient slot of its own (EIP-1153): clear at every transaction's start.
    bytes32 private constant LOCK_SLOT = keccak256("walletgate.test.UptoPermit2Proxy.lock");

    modifier nonReentrant() {
        bytes32 slot = LOCK_SLOT;
        uint256 locked;
        assembly {
            locked := tload(slot)
        }
        if (locked != 0) revert ReentrancyGuardReentrantCall();
        assembly {
            tstore(slot, 1)
        }
        _;
        assembly {
            tstore(slot, 0)
        }
    }

    /// Moves `amount` (at most the permitted amount) from `owner` to `witness.to` through Permit2.
    function settle(
        ISignatureTransfer.PermitTransferFrom calldata permit,
        uint256 amount,
        address owner,
        Witness calldata witness,
        bytes calldata signature
    ) external nonReentrant {
        _settle(permit, amount, owner, witness, signature);
        emit Settled();
    }

    /// As `settle`, after trying an EIP-2612 permit of the token to Permit2 (a
    /// failed permit is only logged: the allowance may exist already).
    function settleWithPermit(
        EIP2612Permit calldata permit2612,
        ISignatureTransfer.PermitTransferFrom calldata permit,
        uint256 amount,
        address owner,
        Witness calldata witness,
        bytes calldata signature
    ) external nonReentrant {
        if (permit2612.value != permit.permitted.amount) revert Permit2612AmountMismatch();
        _tryPermit(permit.permitted.token, owner, permit2612);
        _settle(permit, amount, owner, witness, signature);
        emit SettledWithPermit();
    }

    // Its own frame: inlined in `settleWithPermit` the arguments overflow the stack.
    function _tryPermit(address token, address owner, EIP2612Permit calldata permit2612) private {
        try IERC2612(token).permit(
            owner, address(PERMIT2), permit2612.value, permit2612.deadline, permit2612.v, permit2612.r, permit2612.s
        ) {} catch Error(string memory reason) {
            emit EIP2612PermitFailedWithReason(reason);
        } catch Panic(uint256 errorCode) {
            emit EIP2612PermitFailedWithPanic(errorCode);
        } catch (bytes memory data) {
            emit EIP2612PermitFailedWithData(data);
        }
    }

    // The rules, in the documented order: the ceiling, the caller, the
    // witness hash, the non-zero and timing checks, then Permit2 (deadline,
    // nonce, signature, the pull on the owner's allowance).
    function _settle(
        ISignatureTransfer.PermitTransferFrom calldata permit,
        uint256 amount,
        address owner,
        Witness calldata witness,
        bytes calldata signature
    ) private {
        if (amount > permit.permitted.amount) revert AmountExceedsPermitted();
        if (msg.sender != witness.facilitator) revert UnauthorizedFacilitator();
        bytes32 witnessHash = keccak256(abi.encode(WITNESS_TYPEHASH, witness.to, witness.facilitator, witness.validAfter));
        if (amount == 0) revert InvalidAmount();
        if (owner == address(0)) revert InvalidOwner();
        if (witness.to == address(0)) revert InvalidDestination();
        if (block.timestamp < witness.validAfter) revert PaymentTooEarly();
        PERMIT2.permitWitnessTransferFrom(
            permit,
            ISignatureTransfer.SignatureTransferDetails({to: witness.to, requestedAmount: amount}),
            owner,
            witnessHash,
            WITNESS_TYPE_STRING,
            signature
        );
    }
}
