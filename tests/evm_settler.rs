//! walletgate's own settler against a real chain: anvil with Circle's USDC
//! (`tests/chain_support`). Every test pays fresh addresses from a fresh,
//! funded settler key, so balances and nonces are asserted exactly whatever
//! else runs on the chain; the tests that pause mining get a chain of their own.

mod chain_support;

use std::sync::Arc;
use std::time::Duration;

use alloy_primitives::{Address, B256, U256};
use serde_json::json;
use walletgate::client::payer::Payer;
use walletgate::x402::facilitator::evm_settler::{EvmSettler, EvmSettlerBuilder, SettlerKey};
use walletgate::x402::facilitator::evm_settler::{
    MAX_FAILURES, MemorySettlementRecords, SettlementRecords, reasons,
};
use walletgate::x402::facilitator::{
    Facilitator, FacilitatorErrorKind, FacilitatorRequest, IdempotencyKey, code_for_reason, reason,
};
use walletgate::x402::server::PaymentOption;
use walletgate::x402::wire::{
    AtomicAmount, Network, PaymentPayload, PaymentRequirements, SettleResponse,
};

use chain_support::{
    Hostility, ProxyMode, RpcProxy, SendFault, UPTO_PROXY, USDC, approve_permit2, balance,
    deploy_erc1271_wallet, deploy_hostile_wallet, fresh_payer_key, mint, private_chain, rpc,
    set_eth_balance, shared_rpc_url, transaction_count,
};

const PRICE: u64 = 10_000;
const ONE_ETH: u128 = 1_000_000_000_000_000_000;

fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

fn fresh_key() -> SettlerKey {
    SettlerKey::from_hex(&fresh_payer_key().to_string()).unwrap()
}

struct Setup {
    rpc: String,
    settler: EvmSettler,
    records: Arc<MemorySettlementRecords>,
    pay_to: Address,
}

/// A settler with a fresh key holding `wei`, reaching the chain at `node`
/// (the chain itself or a proxy in front of it at `rpc`).
async fn settler_at(rpc: &str, node: &str, wei: u128, receipt_timeout: Duration) -> Setup {
    let key = fresh_key();
    set_eth_balance(rpc, key.address(), wei).await;
    let records = Arc::new(MemorySettlementRecords::new());
    let settler = connect(node, key, records.clone(), receipt_timeout).await;
    let pay_to = Payer::from_key(fresh_payer_key().0)
        .unwrap()
        .address_bytes();
    Setup {
        rpc: rpc.to_owned(),
        settler,
        records,
        pay_to,
    }
}

/// A settler process: `key`, `records`, a fresh nonce manager.
async fn connect(
    node: &str,
    key: SettlerKey,
    records: Arc<dyn SettlementRecords>,
    receipt_timeout: Duration,
) -> EvmSettler {
    let (settler, report) = EvmSettler::builder(node, key, Network::base_sepolia())
        .with_asset(USDC)
        .with_records(records)
        .with_receipt_timeout(receipt_timeout)
        .connect()
        .await
        .unwrap();
    assert_eq!(
        report.low_balance,
        report.balance_wei < 1_000_000_000_000_000
    );
    settler
}

async fn settler(wei: u128) -> Setup {
    let rpc = shared_rpc_url();
    settler_at(&rpc, &rpc, wei, Duration::from_secs(30)).await
}

fn offer(pay_to: Address) -> PaymentRequirements {
    PaymentOption::base_sepolia_usdc(&pay_to.to_checksum(None))
        .unwrap()
        .requirements_for_amount(AtomicAmount::new(PRICE.into()))
}

/// A funded payer's payment of `PRICE` to `pay_to`.
async fn funded_payment(rpc: &str, pay_to: Address, funds: u64) -> (FacilitatorRequest, Address) {
    let payer = Payer::from_key(fresh_payer_key().0).unwrap();
    mint(rpc, payer.address_bytes(), funds).await;
    let offer = offer(pay_to);
    let payload = payer.pay(&offer, now()).unwrap();
    (
        FacilitatorRequest::new(payload, offer),
        payer.address_bytes(),
    )
}

fn units(n: u64) -> U256 {
    U256::from(n)
}

async fn settler_nonce(setup: &Setup) -> u64 {
    transaction_count(&setup.rpc, setup.settler.address()).await
}

#[tokio::test]
async fn verify_then_settle_moves_the_exact_amount_once_and_only_its_caller_is_told_again() {
    let setup = settler(ONE_ETH).await;
    let (request, from) = funded_payment(&setup.rpc, setup.pay_to, 1_000_000).await;
    let verdict = setup.settler.verify(&request).await.unwrap();
    assert!(verdict.is_valid, "{verdict:?}");
    assert_eq!(verdict.payer, Some(from.to_checksum(None)));
    let caller = IdempotencyKey::new("first-caller-0123456789").unwrap();
    let keyed = request.clone().with_idempotency_key(caller.clone());
    let settled = setup.settler.settle(&keyed).await.unwrap();
    assert!(settled.success, "{settled:?}");
    assert_eq!(settled.transaction.len(), 66);
    assert_eq!(
        chain_support::mined_status(&setup.rpc, settled.transaction.parse().unwrap()).await,
        1
    );
    assert_eq!(balance(&setup.rpc, from).await, units(1_000_000 - PRICE));
    assert_eq!(balance(&setup.rpc, setup.pay_to).await, units(PRICE));
    assert_eq!(settler_nonce(&setup).await, 1);

    // Its caller asks again: the same answer, nothing sent.
    let again = setup.settler.settle(&keyed).await.unwrap();
    assert_eq!(again, settled);
    // A copy without the key, or with another, is refused naming the transaction.
    let stranger = IdempotencyKey::new("another-caller-0123456789").unwrap();
    for copy in [
        request.clone(),
        request.clone().with_idempotency_key(stranger),
    ] {
        let refused = setup.settler.settle(&copy).await.unwrap();
        assert!(!refused.success, "{refused:?}");
        assert_eq!(
            refused.error_reason.as_deref(),
            Some(reasons::NONCE_ALREADY_USED)
        );
        assert_eq!(refused.transaction, "");
        assert!(
            refused
                .error_message
                .as_deref()
                .is_some_and(|message| message.contains(&settled.transaction)),
            "{refused:?}"
        );
    }
    // Verified again, it is a replay, told by the token itself.
    let replay = setup.settler.verify(&request).await.unwrap();
    assert_eq!(
        replay.invalid_reason.as_deref(),
        Some(reasons::NONCE_ALREADY_USED)
    );
    // A settler that never saw it (another process, records lost) does not
    // broadcast it, even to the first caller's key.
    let other = settler(ONE_ETH).await;
    let refused = other.settler.settle(&keyed).await.unwrap();
    assert!(!refused.success);
    assert_eq!(
        refused.error_reason.as_deref(),
        Some(reasons::NONCE_ALREADY_USED)
    );
    assert_eq!(
        settler_nonce(&other).await,
        0,
        "a replay never reaches the chain"
    );
    assert_eq!(settler_nonce(&setup).await, 1);
    assert_eq!(balance(&setup.rpc, setup.pay_to).await, units(PRICE));
}

/// The high-s twin of a valid signature (`s' = n - s`, `v` flipped).
fn high_s_twin(payload: &mut PaymentPayload) {
    let text = payload.payload["signature"].as_str().unwrap().to_owned();
    let mut bytes = alloy_primitives::hex::decode(&text).unwrap();
    let n = U256::from_str_radix(
        "fffffffffffffffffffffffffffffffebaaedce6af48a03bbfd25e8cd0364141",
        16,
    )
    .unwrap();
    let s = U256::from_be_slice(&bytes[32..64]);
    bytes[32..64].copy_from_slice(&(n - s).to_be_bytes::<32>());
    bytes[64] = if bytes[64] == 27 { 28 } else { 27 };
    payload.payload["signature"] = format!("0x{}", alloy_primitives::hex::encode(bytes)).into();
}

#[tokio::test]
async fn a_high_s_or_tampered_payment_never_reaches_the_chain() {
    let setup = settler(ONE_ETH).await;
    let (request, from) = funded_payment(&setup.rpc, setup.pay_to, 1_000_000).await;
    let mut twin = request.payment_payload().clone();
    high_s_twin(&mut twin);
    let twin = FacilitatorRequest::new(twin, request.payment_requirements().clone());
    let mut tampered = request.payment_payload().clone();
    tampered.payload["authorization"]["value"] = "20000".into();
    let mut tampered_offer = request.payment_requirements().clone();
    tampered_offer.amount = AtomicAmount::new(20_000);
    let tampered = FacilitatorRequest::new(tampered, tampered_offer);
    for bad in [&twin, &tampered] {
        let verdict = setup.settler.verify(bad).await.unwrap();
        assert_eq!(verdict.invalid_reason.as_deref(), Some(reasons::SIGNATURE));
        let settled = setup.settler.settle(bad).await.unwrap();
        assert!(!settled.success);
        assert_eq!(settled.error_reason.as_deref(), Some(reasons::SIGNATURE));
        assert_eq!(settled.transaction, "");
    }
    assert_eq!(settler_nonce(&setup).await, 0);
    assert_eq!(balance(&setup.rpc, from).await, units(1_000_000));
}

#[tokio::test]
async fn twenty_different_payments_settled_at_once_all_land() {
    let setup = Arc::new(settler(ONE_ETH).await);
    let mut payments = Vec::new();
    for _ in 0..20 {
        payments.push(funded_payment(&setup.rpc, setup.pay_to, PRICE).await);
    }
    let mut tasks = Vec::new();
    for (request, _) in payments.clone() {
        let setup = setup.clone();
        tasks.push(tokio::spawn(
            async move { setup.settler.settle(&request).await },
        ));
    }
    let mut transactions = std::collections::HashSet::new();
    for task in tasks {
        let settled = task.await.unwrap().unwrap();
        assert!(settled.success, "{settled:?}");
        transactions.insert(settled.transaction);
    }
    assert_eq!(transactions.len(), 20);
    for (_, from) in payments {
        assert_eq!(balance(&setup.rpc, from).await, U256::ZERO);
    }
    assert_eq!(balance(&setup.rpc, setup.pay_to).await, units(20 * PRICE));
    assert_eq!(
        settler_nonce(&setup).await,
        20,
        "no nonce collided or was skipped"
    );
}

#[tokio::test]
async fn twenty_concurrent_copies_of_one_payment_land_once_and_one_is_told_so() {
    let setup = Arc::new(settler(ONE_ETH).await);
    let (request, from) = funded_payment(&setup.rpc, setup.pay_to, 1_000_000).await;
    let answers = settle_copies(&setup, &request, 20).await;
    let told: Vec<_> = answers.iter().filter(|settled| settled.success).collect();
    assert_eq!(told.len(), 1, "one success per authorization: {answers:?}");
    for refused in answers.iter().filter(|settled| !settled.success) {
        assert_eq!(
            refused.error_reason.as_deref(),
            Some(reasons::NONCE_ALREADY_USED),
            "{refused:?}"
        );
    }
    assert_eq!(balance(&setup.rpc, from).await, units(1_000_000 - PRICE));
    assert_eq!(balance(&setup.rpc, setup.pay_to).await, units(PRICE));
    assert_eq!(settler_nonce(&setup).await, 1);

    // Twenty at once under the first caller's key: each waits for the one
    // settlement and is told its outcome, never pending.
    let (request, from) = funded_payment(&setup.rpc, setup.pay_to, 1_000_000).await;
    let keyed = request.with_idempotency_key(IdempotencyKey::new("one-caller-0123456789").unwrap());
    let answers = settle_copies(&setup, &keyed, 20).await;
    assert!(answers.iter().all(|settled| settled.success), "{answers:?}");
    let transactions: std::collections::HashSet<_> =
        answers.iter().map(|settled| &settled.transaction).collect();
    assert_eq!(transactions.len(), 1, "the one transaction");
    assert_eq!(balance(&setup.rpc, from).await, units(1_000_000 - PRICE));
    assert_eq!(settler_nonce(&setup).await, 2);
}

/// `count` settles of `request` at once.
async fn settle_copies(
    setup: &Arc<Setup>,
    request: &FacilitatorRequest,
    count: usize,
) -> Vec<SettleResponse> {
    let tasks: Vec<_> = (0..count)
        .map(|_| {
            let (setup, request) = (setup.clone(), request.clone());
            tokio::spawn(async move { setup.settler.settle(&request).await })
        })
        .collect();
    let mut answers = Vec::new();
    for task in tasks {
        answers.push(task.await.unwrap().unwrap());
    }
    answers
}

#[tokio::test]
async fn a_settler_without_gas_money_is_unavailable_until_funded_and_nothing_moves() {
    let setup = settler(0).await;
    let (request, from) = funded_payment(&setup.rpc, setup.pay_to, 1_000_000).await;
    // Refused at verify (nothing would be served) and at settle.
    let error = setup.settler.verify(&request).await.unwrap_err();
    assert_eq!(error.kind(), &FacilitatorErrorKind::Unavailable);
    assert!(error.detail().contains("holds 0 wei"), "{error}");
    let error = setup.settler.settle(&request).await.unwrap_err();
    assert_eq!(error.kind(), &FacilitatorErrorKind::Unavailable);
    assert!(error.detail().contains("gas"), "{error}");
    assert_eq!(balance(&setup.rpc, from).await, units(1_000_000));
    assert_eq!(settler_nonce(&setup).await, 0);
    let key = walletgate::x402::facilitator::evm_settler::SettlementKey {
        chain_id: 84532,
        asset: USDC,
        from,
        nonce: request.exact_evm().unwrap().nonce,
    };
    assert_eq!(
        setup.records.get(&key).await.unwrap(),
        None,
        "nothing recorded as sent"
    );
    set_eth_balance(&setup.rpc, setup.settler.address(), ONE_ETH).await;
    let settled = setup.settler.settle(&request).await.unwrap();
    assert!(settled.success, "{settled:?}");
    assert_eq!(balance(&setup.rpc, from).await, units(1_000_000 - PRICE));
}

#[tokio::test]
async fn a_balance_spent_between_verify_and_settle_fails_naming_the_balance_and_sends_nothing() {
    let setup = settler(ONE_ETH).await;
    let (request, from) = funded_payment(&setup.rpc, setup.pay_to, PRICE).await;
    assert!(setup.settler.verify(&request).await.unwrap().is_valid);
    // The payer spends it elsewhere first: a plain token transfer of all of it.
    let elsewhere = Payer::from_key(fresh_payer_key().0)
        .unwrap()
        .address_bytes();
    chain_support::spend_all_usdc(&setup.rpc, from, elsewhere).await;
    let settled = setup.settler.settle(&request).await.unwrap();
    assert!(!settled.success);
    assert_eq!(
        settled.error_reason.as_deref(),
        Some(reasons::INSUFFICIENT_BALANCE)
    );
    assert!(
        settled
            .error_message
            .as_deref()
            .unwrap_or_default()
            .contains("balance"),
        "{settled:?}"
    );
    assert_eq!(settler_nonce(&setup).await, 0);
    assert_eq!(balance(&setup.rpc, setup.pay_to).await, U256::ZERO);
}

#[tokio::test]
async fn an_rpc_down_at_verify_is_unavailable_and_nothing_moves() {
    let rpc = shared_rpc_url();
    let proxy = RpcProxy::start(&rpc).await;
    let url = proxy.url();
    let setup = settler_at(&rpc, &url, ONE_ETH, Duration::from_secs(30)).await;
    let (request, from) = funded_payment(&rpc, setup.pay_to, 1_000_000).await;
    proxy.set(ProxyMode::Down);
    let error = setup.settler.verify(&request).await.unwrap_err();
    assert_eq!(error.kind(), &FacilitatorErrorKind::Unavailable);
    let error = setup.settler.settle(&request).await.unwrap_err();
    assert_eq!(error.kind(), &FacilitatorErrorKind::Unavailable);
    assert_eq!(balance(&rpc, from).await, units(1_000_000));
    proxy.set(ProxyMode::Pass);
    assert!(setup.settler.verify(&request).await.unwrap().is_valid);
}

#[tokio::test]
async fn a_lost_receipt_is_pending_then_the_same_transaction_once_seen() {
    let rpc = shared_rpc_url();
    let proxy = RpcProxy::start(&rpc).await;
    let url = proxy.url();
    let setup = settler_at(&rpc, &url, ONE_ETH, Duration::from_secs(1)).await;
    let (request, from) = funded_payment(&rpc, setup.pay_to, 1_000_000).await;
    proxy.set(ProxyMode::SwallowReceipts);
    let pending = setup.settler.settle(&request).await.unwrap_err();
    assert_eq!(pending.kind(), &FacilitatorErrorKind::Pending, "{pending}");
    let sent: B256 = pending.transaction().unwrap().parse().unwrap();
    // Mined at once by anvil: the transfer landed, only its answer was lost.
    assert_eq!(balance(&rpc, from).await, units(1_000_000 - PRICE));
    // Still no receipt: still pending, nothing sent again.
    let still = setup.settler.settle(&request).await.unwrap_err();
    assert_eq!(still.kind(), &FacilitatorErrorKind::Pending);
    proxy.set(ProxyMode::Pass);
    let settled = setup.settler.settle(&request).await.unwrap();
    assert!(settled.success, "{settled:?}");
    assert_eq!(settled.transaction, format!("{sent:#x}"));
    assert_eq!(balance(&rpc, from).await, units(1_000_000 - PRICE));
    assert_eq!(balance(&rpc, setup.pay_to).await, units(PRICE));
    assert_eq!(
        settler_nonce(&setup).await,
        1,
        "exactly one transaction mined"
    );
}

#[tokio::test]
async fn a_stuck_transaction_is_replaced_with_the_same_nonce_and_lands_once() {
    let chain = private_chain();
    let setup = Arc::new(settler_at(&chain, &chain, ONE_ETH, Duration::from_secs(1)).await);
    let (request, from) = funded_payment(&chain, setup.pay_to, 1_000_000).await;
    rpc(&chain, "evm_setAutomine", json!([false])).await;
    let settling = {
        let (setup, request) = (setup.clone(), request.clone());
        tokio::spawn(async move { setup.settler.settle(&request).await })
    };
    // Past the first wait the replacement is sent; then a block is mined.
    tokio::time::sleep(Duration::from_millis(1_600)).await;
    rpc(&chain, "evm_mine", json!([])).await;
    let settled = settling.await.unwrap().unwrap();
    rpc(&chain, "evm_setAutomine", json!([true])).await;
    assert!(settled.success, "{settled:?}");
    let key = walletgate::x402::facilitator::evm_settler::SettlementKey {
        chain_id: 84532,
        asset: USDC,
        from,
        nonce: request.exact_evm().unwrap().nonce,
    };
    let record = setup.records.get(&key).await.unwrap().unwrap();
    assert_eq!(record.transactions.len(), 2, "one replacement");
    assert_eq!(
        settled.transaction,
        format!("{:#x}", record.transactions[1])
    );
    let mined = rpc(
        &chain,
        "eth_getTransactionByHash",
        json!([settled.transaction]),
    )
    .await;
    assert_eq!(mined["nonce"], "0x0", "the replacement reused the nonce");
    assert_eq!(balance(&chain, from).await, units(1_000_000 - PRICE));
    assert_eq!(balance(&chain, setup.pay_to).await, units(PRICE));
    assert_eq!(settler_nonce(&setup).await, 1);
}

#[tokio::test]
async fn startup_checks_refuse_another_chain_and_an_asset_without_code() {
    let rpc = shared_rpc_url();
    let wrong = EvmSettler::builder(&rpc, fresh_key(), Network::base())
        .with_asset(USDC)
        .connect()
        .await
        .unwrap_err()
        .to_string();
    assert!(
        wrong.contains("chain 84532") && wrong.contains("eip155:8453"),
        "{wrong}"
    );
    let no_code = EvmSettler::builder(&rpc, fresh_key(), Network::base_sepolia())
        .with_asset(Address::repeat_byte(0x42))
        .connect()
        .await
        .unwrap_err()
        .to_string();
    assert!(no_code.contains("no code"), "{no_code}");
}

/// A payment from a smart wallet: `owner` signs the authorization whose
/// `from` is the wallet.
fn wallet_payment(owner: &Payer, wallet: Address, pay_to: Address) -> FacilitatorRequest {
    let offer = offer(pay_to);
    let nonce = B256::from(fresh_payer_key().0);
    let mut authorization = owner.authorization(&offer, now(), nonce);
    authorization.from = wallet.to_checksum(None);
    let payload = owner.sign(&offer, authorization).unwrap();
    FacilitatorRequest::new(payload, offer)
}

#[tokio::test]
async fn a_smart_wallet_pays_by_its_own_check_and_a_refusing_one_is_invalid() {
    let setup = settler(ONE_ETH).await;
    let owner = Payer::from_key(fresh_payer_key().0).unwrap();
    let wallet = deploy_erc1271_wallet(&setup.rpc, owner.address_bytes(), false).await;
    mint(&setup.rpc, wallet, 1_000_000).await;
    let request = wallet_payment(&owner, wallet, setup.pay_to);
    let verdict = setup.settler.verify(&request).await.unwrap();
    assert!(verdict.is_valid, "{verdict:?}");
    assert_eq!(verdict.payer, Some(wallet.to_checksum(None)));
    let settled = setup.settler.settle(&request).await.unwrap();
    assert!(settled.success, "{settled:?}");
    assert_eq!(balance(&setup.rpc, wallet).await, units(1_000_000 - PRICE));
    assert_eq!(balance(&setup.rpc, setup.pay_to).await, units(PRICE));

    // Another signer than the owner: the wallet refuses, nothing is sent.
    let stranger = Payer::from_key(fresh_payer_key().0).unwrap();
    let forged = wallet_payment(&stranger, wallet, setup.pay_to);
    let verdict = setup.settler.verify(&forged).await.unwrap();
    assert_eq!(verdict.invalid_reason.as_deref(), Some(reasons::SIGNATURE));
    // A wallet that refuses everything.
    let refusing = deploy_erc1271_wallet(&setup.rpc, owner.address_bytes(), true).await;
    mint(&setup.rpc, refusing, 1_000_000).await;
    let refused = wallet_payment(&owner, refusing, setup.pay_to);
    let verdict = setup.settler.verify(&refused).await.unwrap();
    assert_eq!(verdict.invalid_reason.as_deref(), Some(reasons::SIGNATURE));
    let settled = setup.settler.settle(&refused).await.unwrap();
    assert!(!settled.success);
    assert_eq!(settled.error_reason.as_deref(), Some(reasons::SIGNATURE));
    assert_eq!(balance(&setup.rpc, refusing).await, units(1_000_000));
    assert_eq!(
        settler_nonce(&setup).await,
        1,
        "only the approved payment was sent"
    );
}

/// A process that broadcast, lost the receipt and stopped: a new process
/// with the same key and records reports the recorded transaction, once.
async fn a_restarted_settler_reconciles_from_its_records(records: Arc<dyn SettlementRecords>) {
    let rpc = shared_rpc_url();
    let proxy = RpcProxy::start(&rpc).await;
    let url = proxy.url();
    let key = fresh_key();
    set_eth_balance(&rpc, key.address(), ONE_ETH).await;
    let first = connect(&url, key.clone(), records.clone(), Duration::from_secs(1)).await;
    let pay_to = Payer::from_key(fresh_payer_key().0)
        .unwrap()
        .address_bytes();
    let (request, from) = funded_payment(&rpc, pay_to, 1_000_000).await;
    proxy.set(ProxyMode::SwallowReceipts);
    let pending = first.settle(&request).await.unwrap_err();
    assert_eq!(pending.kind(), &FacilitatorErrorKind::Pending);
    drop(first);
    proxy.set(ProxyMode::Pass);
    let restarted = connect(&url, key.clone(), records, Duration::from_secs(1)).await;
    let settled = restarted.settle(&request).await.unwrap();
    assert!(settled.success, "{settled:?}");
    assert_eq!(Some(settled.transaction.as_str()), pending.transaction());
    assert_eq!(balance(&rpc, from).await, units(1_000_000 - PRICE));
    assert_eq!(balance(&rpc, pay_to).await, units(PRICE));
    assert_eq!(transaction_count(&rpc, key.address()).await, 1);
}

#[tokio::test]
async fn a_restarted_settler_reconciles_from_records_it_shares() {
    a_restarted_settler_reconciles_from_its_records(Arc::new(MemorySettlementRecords::new())).await;
}

#[cfg(feature = "redis")]
#[path = "redis_support/mod.rs"]
mod redis_support;

#[cfg(feature = "redis")]
#[tokio::test]
async fn a_restarted_settler_reconciles_from_redis() {
    use walletgate::redis::{RedisConfig, RedisConnection, RedisSettlementRecords};
    let config = RedisConfig::new(redis_support::shared_url())
        .with_prefix(redis_support::unique_prefix("settler-restart"))
        .with_timeout(Duration::from_secs(2));
    let records = RedisSettlementRecords::new(RedisConnection::open(&config).unwrap());
    a_restarted_settler_reconciles_from_its_records(Arc::new(records)).await;
}

#[tokio::test]
async fn a_nonce_used_behind_the_settlers_back_is_reseeded_from_the_node() {
    let setup = settler(ONE_ETH).await;
    let (first, _) = funded_payment(&setup.rpc, setup.pay_to, 1_000_000).await;
    assert!(setup.settler.settle(&first).await.unwrap().success);
    // Another sender on the same key takes the next nonce.
    let address = setup.settler.address();
    rpc(&setup.rpc, "anvil_impersonateAccount", json!([address])).await;
    let hash = rpc(
        &setup.rpc,
        "eth_sendTransaction",
        json!([{ "from": address, "to": address, "value": "0x0" }]),
    )
    .await;
    chain_support::mined_status(&setup.rpc, hash.as_str().unwrap().parse().unwrap()).await;
    rpc(
        &setup.rpc,
        "anvil_stopImpersonatingAccount",
        json!([address]),
    )
    .await;
    let (second, from) = funded_payment(&setup.rpc, setup.pay_to, 1_000_000).await;
    let settled = setup.settler.settle(&second).await.unwrap();
    assert!(settled.success, "{settled:?}");
    let mined = rpc(
        &setup.rpc,
        "eth_getTransactionByHash",
        json!([settled.transaction]),
    )
    .await;
    assert_eq!(mined["nonce"], "0x2");
    assert_eq!(balance(&setup.rpc, from).await, units(1_000_000 - PRICE));
    assert_eq!(settler_nonce(&setup).await, 3);
}

alloy_sol_types::sol! {
    function blacklist(address account);
    function unBlacklist(address account);
}

#[tokio::test]
async fn a_blacklisted_recipient_is_the_operators_problem_not_the_payers() {
    use alloy_sol_types::SolCall;
    let setup = settler(ONE_ETH).await;
    let (request, from) = funded_payment(&setup.rpc, setup.pay_to, 1_000_000).await;
    let minter_call = |data: Vec<u8>| {
        json!({ "from": chain_support::MINTER, "to": USDC,
                "data": format!("0x{}", alloy_primitives::hex::encode(data)) })
    };
    let hash = chain_support::send_from_minter(
        &setup.rpc,
        minter_call(
            blacklistCall {
                account: setup.pay_to,
            }
            .abi_encode(),
        ),
    )
    .await;
    chain_support::mined_status(&setup.rpc, hash).await;
    let error = setup.settler.verify(&request).await.unwrap_err();
    assert_eq!(error.kind(), &FacilitatorErrorKind::Unavailable);
    assert!(error.detail().contains("blacklisted"), "{error}");
    let error = setup.settler.settle(&request).await.unwrap_err();
    assert_eq!(error.kind(), &FacilitatorErrorKind::Unavailable);
    assert_eq!(settler_nonce(&setup).await, 0, "nothing sent");
    let hash = chain_support::send_from_minter(
        &setup.rpc,
        minter_call(
            unBlacklistCall {
                account: setup.pay_to,
            }
            .abi_encode(),
        ),
    )
    .await;
    chain_support::mined_status(&setup.rpc, hash).await;
    assert!(setup.settler.settle(&request).await.unwrap().success);
    assert_eq!(balance(&setup.rpc, from).await, units(1_000_000 - PRICE));
}

#[tokio::test]
async fn the_settler_never_shows_its_key_or_its_rpc_path() {
    let rpc = shared_rpc_url();
    let key_hex = fresh_payer_key().to_string();
    let key = SettlerKey::from_hex(&key_hex).unwrap();
    let with_path = format!("{rpc}/secret-api-key");
    let (settler, _) = EvmSettler::builder(&rpc, key.clone(), Network::base_sepolia())
        .with_asset(USDC)
        .connect()
        .await
        .unwrap();
    for shown in [format!("{settler:?}"), format!("{key:?}")] {
        assert!(!shown.contains(&key_hex[2..]), "{shown}");
    }
    let builder = EvmSettler::builder(&with_path, key, Network::base_sepolia());
    assert!(!format!("{builder:?}").contains("secret-api-key"));
}

/// Settles `request` (signed at `started`, valid 9 s) while `proxy` swallows
/// receipts: pending; then waits until fewer than 6 s of it are left, so a
/// fresh payment would be refused offline. The pending error.
async fn pending_until_nearly_expired(
    setup: &Setup,
    proxy: &RpcProxy,
    request: &FacilitatorRequest,
    started: u64,
) -> walletgate::x402::facilitator::FacilitatorError {
    proxy.set(ProxyMode::SwallowReceipts);
    let pending = setup.settler.settle(request).await.unwrap_err();
    assert_eq!(pending.kind(), &FacilitatorErrorKind::Pending);
    proxy.set(ProxyMode::Pass);
    while now() < started + 4 {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    pending
}

#[tokio::test]
async fn a_pending_settlement_still_answers_after_its_window_nearly_closed() {
    let rpc = shared_rpc_url();
    let proxy = RpcProxy::start(&rpc).await;
    let url = proxy.url();
    let setup = settler_at(&rpc, &url, ONE_ETH, Duration::from_secs(1)).await;
    let payer = Payer::from_key(fresh_payer_key().0).unwrap();
    mint(&rpc, payer.address_bytes(), 1_000_000).await;
    let mut offer = offer(setup.pay_to);
    offer.max_timeout_seconds = 9;
    let started = now();
    let request = FacilitatorRequest::new(payer.pay(&offer, started).unwrap(), offer);
    let pending = pending_until_nearly_expired(&setup, &proxy, &request, started).await;
    let verdict = setup.settler.verify(&request).await.unwrap();
    assert!(!verdict.is_valid);
    let settled = setup.settler.settle(&request).await.unwrap();
    assert!(settled.success, "{settled:?}");
    assert_eq!(Some(settled.transaction.as_str()), pending.transaction());
    assert_eq!(balance(&rpc, setup.pay_to).await, units(PRICE));
}

#[tokio::test]
async fn with_confirmations_a_settlement_waits_for_blocks_on_top() {
    let chain = shared_rpc_url();
    let key = fresh_key();
    set_eth_balance(&chain, key.address(), ONE_ETH).await;
    let (settler, _) = EvmSettler::builder(&chain, key, Network::base_sepolia())
        .with_asset(USDC)
        .with_confirmations(2)
        .with_receipt_timeout(Duration::from_secs(10))
        .connect()
        .await
        .unwrap();
    let pay_to = Payer::from_key(fresh_payer_key().0)
        .unwrap()
        .address_bytes();
    let (request, _) = funded_payment(&chain, pay_to, 1_000_000).await;
    let settling = tokio::spawn(async move { settler.settle(&request).await });
    // Blocks come as other transactions arrive; mine some as well.
    while !settling.is_finished() {
        rpc_mine(&chain).await;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let settled = settling.await.unwrap().unwrap();
    assert!(settled.success, "{settled:?}");
    let receipt = rpc(
        &chain,
        "eth_getTransactionReceipt",
        json!([settled.transaction]),
    )
    .await;
    let mined_in = u64::from_str_radix(
        receipt["blockNumber"]
            .as_str()
            .unwrap()
            .trim_start_matches("0x"),
        16,
    )
    .unwrap();
    let head = rpc(&chain, "eth_blockNumber", json!([])).await;
    let head = u64::from_str_radix(head.as_str().unwrap().trim_start_matches("0x"), 16).unwrap();
    assert!(
        head >= mined_in + 2,
        "answered at block {head}, mined in {mined_in}"
    );
}

async fn rpc_mine(url: &str) {
    rpc(url, "evm_mine", json!([])).await;
}

/// `sign-in-with-x` for contract wallets: the settler asks the wallet
/// (ERC-1271 `isValidSignature`) through its node.
#[cfg(feature = "siwx")]
#[tokio::test]
async fn a_contract_wallet_confirms_its_owners_sign_in_and_no_one_elses() {
    use walletgate::x402::facilitator::ContractSignatures;
    let setup = settler(ONE_ETH).await;
    let owner = Payer::from_key(fresh_payer_key().0).unwrap();
    let wallet = deploy_erc1271_wallet(&setup.rpc, owner.address_bytes(), false).await;
    let digest = alloy_primitives::eip191_hash_message("example.test wants you to sign in");
    let chain = 84532;
    let signed = owner.sign_digest(digest);
    assert!(
        setup
            .settler
            .is_valid_signature(chain, wallet, digest, &signed)
            .await
    );
    // Another signer, another chain, a wallet that refuses, an account with no code.
    let stranger = Payer::from_key(fresh_payer_key().0).unwrap();
    let forged = stranger.sign_digest(digest);
    assert!(
        !setup
            .settler
            .is_valid_signature(chain, wallet, digest, &forged)
            .await
    );
    assert!(
        !setup
            .settler
            .is_valid_signature(1, wallet, digest, &signed)
            .await
    );
    let refusing = deploy_erc1271_wallet(&setup.rpc, owner.address_bytes(), true).await;
    assert!(
        !setup
            .settler
            .is_valid_signature(chain, refusing, digest, &signed)
            .await
    );
    let eoa = owner.address_bytes();
    assert!(
        !setup
            .settler
            .is_valid_signature(chain, eoa, digest, &signed)
            .await
    );
}

/// A fresh, unfunded key's authorization of `value` units to `pay_to`.
fn unfunded_payment(pay_to: Address, value: u64) -> FacilitatorRequest {
    let payer = Payer::from_key(fresh_payer_key().0).unwrap();
    let offer = PaymentOption::base_sepolia_usdc(&pay_to.to_checksum(None))
        .unwrap()
        .requirements_for_amount(AtomicAmount::new(value.into()));
    FacilitatorRequest::new(payer.pay(&offer, now()).unwrap(), offer)
}

#[tokio::test]
async fn a_zero_value_or_too_small_payment_is_refused_before_the_chain_is_asked() {
    let setup = settler(ONE_ETH).await;
    let zero = unfunded_payment(setup.pay_to, 0);
    let verdict = setup.settler.verify(&zero).await.unwrap();
    assert_eq!(
        verdict.invalid_reason.as_deref(),
        Some(reasons::VALUE_TOO_LOW),
        "{verdict:?}"
    );
    let settled = setup.settler.settle(&zero).await.unwrap();
    assert_eq!(
        settled.error_reason.as_deref(),
        Some(reasons::VALUE_TOO_LOW)
    );

    // An operator's floor above one unit holds the same way.
    let key = fresh_key();
    set_eth_balance(&setup.rpc, key.address(), ONE_ETH).await;
    let (floored, _) = EvmSettler::builder(&setup.rpc, key, Network::base_sepolia())
        .with_asset(USDC)
        .with_min_amount(PRICE.into())
        .connect()
        .await
        .unwrap();
    let small = unfunded_payment(setup.pay_to, PRICE - 1);
    let verdict = floored.verify(&small).await.unwrap();
    assert_eq!(
        verdict.invalid_reason.as_deref(),
        Some(reasons::VALUE_TOO_LOW)
    );
    assert_eq!(settler_nonce(&setup).await, 0, "nothing was sent");
    assert_eq!(transaction_count(&setup.rpc, floored.address()).await, 0);
}

#[tokio::test]
async fn a_smart_wallet_whose_check_loops_is_refused_at_verify_within_the_gas_cap() {
    let setup = settler(ONE_ETH).await;
    let owner = Payer::from_key(fresh_payer_key().0).unwrap();
    let wallet = deploy_hostile_wallet(&setup.rpc, owner.address_bytes(), Hostility::Loops).await;
    mint(&setup.rpc, wallet, 1_000_000).await;
    let request = wallet_payment(&owner, wallet, setup.pay_to);
    let verdict = setup.settler.verify(&request).await.unwrap();
    assert!(!verdict.is_valid, "{verdict:?}");
    let settled = setup.settler.settle(&request).await.unwrap();
    assert!(!settled.success, "{settled:?}");
    assert_eq!(settler_nonce(&setup).await, 0, "nothing was sent");
    assert_eq!(balance(&setup.rpc, wallet).await, units(1_000_000));
}

#[tokio::test]
async fn a_wallet_that_approves_only_without_fees_is_refused_then_denied_a_while() {
    let setup = settler(ONE_ETH).await;
    let owner = Payer::from_key(fresh_payer_key().0).unwrap();
    let wallet =
        deploy_hostile_wallet(&setup.rpc, owner.address_bytes(), Hostility::FreeGasOnly).await;
    mint(&setup.rpc, wallet, 1_000_000).await;
    // Simulated with the fees it will be sent with, it fails as it would mined.
    for _ in 0..=MAX_FAILURES {
        let request = wallet_payment(&owner, wallet, setup.pay_to);
        let verdict = setup.settler.verify(&request).await.unwrap();
        assert_eq!(
            verdict.invalid_reason.as_deref(),
            Some(reasons::SIGNATURE),
            "{verdict:?}"
        );
    }
    // Past the failure rate it is refused before the chain is asked at all.
    let request = wallet_payment(&owner, wallet, setup.pay_to);
    let verdict = setup.settler.verify(&request).await.unwrap();
    assert_eq!(
        verdict.invalid_reason.as_deref(),
        Some(reasons::PAYER_DENIED)
    );
    let settled = setup.settler.settle(&request).await.unwrap();
    assert_eq!(settled.error_reason.as_deref(), Some(reasons::PAYER_DENIED));
    assert_eq!(settler_nonce(&setup).await, 0, "nothing was sent");
    assert_eq!(balance(&setup.rpc, wallet).await, units(1_000_000));
    // Copies of someone's used authorization never count against them:
    // however many are sent, the token still judges each (never denied).
    let (paid, _) = funded_payment(&setup.rpc, setup.pay_to, 1_000_000).await;
    assert!(setup.settler.settle(&paid).await.unwrap().success);
    for _ in 0..=MAX_FAILURES + 1 {
        let copy = setup.settler.verify(&paid).await.unwrap();
        assert_eq!(
            copy.invalid_reason.as_deref(),
            Some(reasons::NONCE_ALREADY_USED)
        );
    }
}

// ---- `upto`: a Permit2 permit settled through the upto proxy ----

/// The ceiling of the `upto` tests' offers.
const CEILING: u64 = 10_000;

/// An `upto` offer of `CEILING` to `pay_to`, naming `facilitator` as the one that settles.
fn upto_offer(pay_to: Address, facilitator: Address) -> PaymentRequirements {
    PaymentOption::upto_permit2(
        Network::base_sepolia(),
        &USDC.to_checksum(None),
        &pay_to.to_checksum(None),
        facilitator,
    )
    .requirements_for_amount(AtomicAmount::new(CEILING.into()))
}

/// A fresh payer holding `funds`, having approved Permit2 for `allowance`
/// (none when 0), and its permit of `CEILING` for the setup's settler signed at `at`.
async fn upto_payment(
    setup: &Setup,
    funds: u64,
    allowance: u64,
    at: u64,
) -> (FacilitatorRequest, Address) {
    let payer = Payer::from_key(fresh_payer_key().0).unwrap();
    let from = payer.address_bytes();
    mint(&setup.rpc, from, funds).await;
    if allowance > 0 {
        approve_permit2(&setup.rpc, from, U256::from(allowance)).await;
    }
    let offer = upto_offer(setup.pay_to, setup.settler.address());
    let payload = payer.pay_upto(&offer, at).unwrap();
    (FacilitatorRequest::new(payload, offer), from)
}

#[tokio::test]
async fn an_upto_permit_settles_the_amount_used_through_the_proxy_once() {
    let setup = settler(ONE_ETH).await;
    let (request, from) = upto_payment(&setup, 1_000_000, 1_000_000, now()).await;
    let verdict = setup.settler.verify(&request).await.unwrap();
    assert!(verdict.is_valid, "{verdict:?}");
    assert_eq!(verdict.payer, Some(from.to_checksum(None)));

    let caller = IdempotencyKey::new("upto-first-caller-0123456789").unwrap();
    let used = request
        .with_settled_amount(AtomicAmount::new(3_456))
        .with_idempotency_key(caller);
    let settled = setup.settler.settle(&used).await.unwrap();
    assert!(settled.success, "{settled:?}");
    assert_eq!(settled.amount, Some(AtomicAmount::new(3_456)));
    let hash: B256 = settled.transaction.parse().unwrap();
    assert_eq!(chain_support::mined_status(&setup.rpc, hash).await, 1);
    // Sent to the proxy from the settler, the witness's facilitator.
    let sent = chain_support::transaction(&setup.rpc, hash).await;
    let address = |field: &str| sent[field].as_str().unwrap().parse::<Address>().unwrap();
    assert_eq!(address("to"), UPTO_PROXY);
    assert_eq!(address("from"), setup.settler.address());
    assert_eq!(balance(&setup.rpc, from).await, units(1_000_000 - 3_456));
    assert_eq!(balance(&setup.rpc, setup.pay_to).await, units(3_456));
    assert_eq!(settler_nonce(&setup).await, 1);

    // Its caller asks again: its answer, nothing sent.
    assert_eq!(setup.settler.settle(&used).await.unwrap(), settled);
    // The same permit for another amount: one signature settles once.
    let more = request.with_settled_amount(AtomicAmount::new(5_000));
    let refused = setup.settler.settle(&more).await.unwrap();
    assert!(!refused.success);
    assert_eq!(
        refused.error_reason.as_deref(),
        Some(reason::PERMIT2_INVALID_NONCE)
    );
    // Verified again, Permit2 itself says the nonce is used; so does a settler that never saw it.
    let replay = setup.settler.verify(&request).await.unwrap();
    assert_eq!(
        replay.invalid_reason.as_deref(),
        Some(reason::PERMIT2_INVALID_NONCE)
    );
    assert_eq!(
        code_for_reason(replay.invalid_reason.as_deref().unwrap()),
        walletgate::envelope::ErrorCode::PaymentReplay
    );
    assert_eq!(settler_nonce(&setup).await, 1);
    assert_eq!(balance(&setup.rpc, setup.pay_to).await, units(3_456));
}

#[tokio::test]
async fn an_upto_permit_settled_for_nothing_sends_nothing_and_above_the_ceiling_is_refused() {
    let setup = settler(ONE_ETH).await;
    let (request, from) = upto_payment(&setup, 1_000_000, 1_000_000, now()).await;
    let nothing = setup
        .settler
        .settle(&request.with_settled_amount(AtomicAmount::new(0)))
        .await
        .unwrap();
    assert!(nothing.success, "{nothing:?}");
    assert_eq!(nothing.transaction, "");
    assert_eq!(nothing.amount, Some(AtomicAmount::new(0)));
    let above = setup
        .settler
        .settle(&request.with_settled_amount(AtomicAmount::new(CEILING as u128 + 1)))
        .await
        .unwrap();
    assert!(!above.success);
    assert_eq!(
        above.error_reason.as_deref(),
        Some(reason::UPTO_SETTLEMENT_EXCEEDS_AMOUNT)
    );
    assert_eq!(settler_nonce(&setup).await, 0, "nothing sent");
    assert_eq!(balance(&setup.rpc, from).await, units(1_000_000));
    // The permit is still good for what it allows.
    let settled = setup
        .settler
        .settle(&request.with_settled_amount(AtomicAmount::new(CEILING.into())))
        .await
        .unwrap();
    assert!(settled.success, "{settled:?}");
    assert_eq!(balance(&setup.rpc, setup.pay_to).await, units(CEILING));
}

#[tokio::test]
async fn upto_permits_the_chain_would_refuse_are_refused_with_the_official_reasons_and_move_nothing()
 {
    let setup = settler(ONE_ETH).await;
    // No Permit2 allowance: a 402 PAYMENT_UNFUNDED, at verify and at settle.
    let (unapproved, from) = upto_payment(&setup, 1_000_000, 0, now()).await;
    let verdict = setup.settler.verify(&unapproved).await.unwrap();
    assert_eq!(
        verdict.invalid_reason.as_deref(),
        Some(reason::PERMIT2_ALLOWANCE_REQUIRED),
        "{verdict:?}"
    );
    assert_eq!(
        code_for_reason(reason::PERMIT2_ALLOWANCE_REQUIRED),
        walletgate::envelope::ErrorCode::PaymentUnfunded
    );
    let settled = setup
        .settler
        .settle(&unapproved.with_settled_amount(AtomicAmount::new(1_000)))
        .await
        .unwrap();
    assert_eq!(
        settled.error_reason.as_deref(),
        Some(reason::PERMIT2_ALLOWANCE_REQUIRED),
        "{settled:?}"
    );
    assert_eq!(balance(&setup.rpc, from).await, units(1_000_000));
    // An allowance below the ceiling is no allowance for it either.
    let (short, _) = upto_payment(&setup, 1_000_000, CEILING - 1, now()).await;
    let verdict = setup.settler.verify(&short).await.unwrap();
    assert_eq!(
        verdict.invalid_reason.as_deref(),
        Some(reason::PERMIT2_ALLOWANCE_REQUIRED)
    );
    // A balance below the ceiling.
    let (poor, _) = upto_payment(&setup, CEILING - 1, 1_000_000, now()).await;
    let verdict = setup.settler.verify(&poor).await.unwrap();
    assert_eq!(
        verdict.invalid_reason.as_deref(),
        Some(reason::PERMIT2_INSUFFICIENT_BALANCE)
    );
    // An expired deadline: signed long ago.
    let (expired, _) = upto_payment(&setup, 1_000_000, 1_000_000, now() - 3_600).await;
    for verdict in [
        setup.settler.verify(&expired).await.unwrap().invalid_reason,
        setup
            .settler
            .settle(&expired.with_settled_amount(AtomicAmount::new(1_000)))
            .await
            .unwrap()
            .error_reason,
    ] {
        assert_eq!(verdict.as_deref(), Some(reason::PERMIT2_DEADLINE_EXPIRED));
    }
    // A witness naming another facilitator: this settler may not send it
    // (the proxy would refuse it: UnauthorizedFacilitator).
    let payer = Payer::from_key(fresh_payer_key().0).unwrap();
    mint(&setup.rpc, payer.address_bytes(), 1_000_000).await;
    approve_permit2(&setup.rpc, payer.address_bytes(), U256::from(1_000_000)).await;
    let offer = upto_offer(setup.pay_to, Address::repeat_byte(0x77));
    let elsewhere = FacilitatorRequest::new(payer.pay_upto(&offer, now()).unwrap(), offer);
    for verdict in [
        setup
            .settler
            .verify(&elsewhere)
            .await
            .unwrap()
            .invalid_reason,
        setup
            .settler
            .settle(&elsewhere.with_settled_amount(AtomicAmount::new(1_000)))
            .await
            .unwrap()
            .error_reason,
    ] {
        assert_eq!(verdict.as_deref(), Some(reason::UPTO_FACILITATOR_MISMATCH));
    }
    assert_eq!(
        balance(&setup.rpc, payer.address_bytes()).await,
        units(1_000_000)
    );
    assert_eq!(balance(&setup.rpc, setup.pay_to).await, units(0));
    assert_eq!(settler_nonce(&setup).await, 0, "nothing sent");
}

#[tokio::test]
async fn the_settler_lists_upto_naming_itself_as_the_facilitator() {
    let setup = settler(ONE_ETH).await;
    let supported = setup.settler.supported().await.unwrap();
    let upto = supported
        .kinds
        .iter()
        .find(|kind| kind.scheme == "upto")
        .expect("upto is listed");
    assert_eq!(upto.network, Network::base_sepolia());
    assert_eq!(
        upto.extra.as_ref().unwrap()["facilitatorAddress"],
        setup.settler.address().to_checksum(None)
    );
}

#[tokio::test]
async fn a_pending_upto_settlement_still_answers_after_its_deadline_nearly_passed() {
    let rpc = shared_rpc_url();
    let proxy = RpcProxy::start(&rpc).await;
    let setup = settler_at(&rpc, &proxy.url(), ONE_ETH, Duration::from_secs(1)).await;
    let payer = Payer::from_key(fresh_payer_key().0).unwrap();
    mint(&rpc, payer.address_bytes(), 1_000_000).await;
    approve_permit2(&rpc, payer.address_bytes(), U256::from(1_000_000)).await;
    let mut offer = upto_offer(setup.pay_to, setup.settler.address());
    offer.max_timeout_seconds = 9;
    let started = now();
    let request = FacilitatorRequest::new(payer.pay_upto(&offer, started).unwrap(), offer)
        .with_settled_amount(AtomicAmount::new(2_500));
    let pending = pending_until_nearly_expired(&setup, &proxy, &request, started).await;
    let settled = setup.settler.settle(&request).await.unwrap();
    assert!(settled.success, "{settled:?}");
    assert_eq!(Some(settled.transaction.as_str()), pending.transaction());
    assert_eq!(balance(&rpc, setup.pay_to).await, units(2_500));
    assert_eq!(settler_nonce(&setup).await, 1, "sent once");
}

/// A settler reaching the chain through `proxy`, its startup report, and
/// the same setup as [`settler_at`].
async fn settler_through(
    chain: &str,
    proxy: &RpcProxy,
    sync_send: bool,
) -> (
    Setup,
    walletgate::x402::facilitator::evm_settler::StartupReport,
) {
    settler_through_configured(chain, proxy, |builder| builder.with_sync_send(sync_send)).await
}

/// [`settler_through`] with `configure` applied to the builder last.
async fn settler_through_configured(
    chain: &str,
    proxy: &RpcProxy,
    configure: impl FnOnce(EvmSettlerBuilder) -> EvmSettlerBuilder,
) -> (
    Setup,
    walletgate::x402::facilitator::evm_settler::StartupReport,
) {
    let key = fresh_key();
    set_eth_balance(chain, key.address(), ONE_ETH).await;
    let records = Arc::new(MemorySettlementRecords::new());
    let settler = EvmSettler::builder(proxy.url(), key, Network::base_sepolia())
        .with_asset(USDC)
        .with_records(records.clone())
        .with_receipt_timeout(Duration::from_secs(10))
        .with_block_poll_interval(Duration::from_millis(50));
    let (settler, report) = configure(settler).connect().await.unwrap();
    let pay_to = Payer::from_key(fresh_payer_key().0)
        .unwrap()
        .address_bytes();
    let setup = Setup {
        rpc: chain.to_owned(),
        settler,
        records,
        pay_to,
    };
    (setup, report)
}

/// `count` payments to `setup.pay_to` from freshly funded payers.
async fn funded_payments(setup: &Setup, count: usize) -> Vec<(FacilitatorRequest, Address)> {
    let mut payments = Vec::new();
    for _ in 0..count {
        payments.push(funded_payment(&setup.rpc, setup.pay_to, 1_000_000).await);
    }
    payments
}

/// `payments` settled at once, each in its own task.
fn settle_all(
    setup: &Arc<Setup>,
    payments: Vec<(FacilitatorRequest, Address)>,
) -> Vec<tokio::task::JoinHandle<Settled>> {
    payments
        .into_iter()
        .map(|(request, from)| {
            let setup = setup.clone();
            tokio::spawn(async move {
                let answer = setup.settler.settle(&request).await;
                (answer, request, from)
            })
        })
        .collect()
}

/// One settlement's answer, its payment and its payer.
type Settled = (
    Result<SettleResponse, walletgate::x402::facilitator::FacilitatorError>,
    FacilitatorRequest,
    Address,
);

/// `count` funded payments to `setup.pay_to`, settled at once: each answer and payer.
async fn settle_at_once(setup: &Arc<Setup>, count: usize) -> Vec<Settled> {
    let payments = funded_payments(setup, count).await;
    let mut answers = Vec::new();
    for task in settle_all(setup, payments) {
        answers.push(task.await.unwrap());
    }
    answers
}

/// The settler's pending and mined nonce counts agree: nothing waits in the pool.
async fn no_transaction_left_waiting(setup: &Setup) {
    let address = setup.settler.address();
    let mined = transaction_count(&setup.rpc, address).await;
    let pending = rpc(
        &setup.rpc,
        "eth_getTransactionCount",
        json!([address, "pending"]),
    )
    .await;
    assert_eq!(
        pending,
        json!(format!("{mined:#x}")),
        "a transaction of the settler still waits in the pool (a nonce gap)"
    );
}

#[tokio::test]
async fn settlements_sent_at_once_use_the_nodes_sync_send_and_one_estimate_each() {
    let rpc = shared_rpc_url();
    let proxy = RpcProxy::start(&rpc).await;
    let (setup, report) = settler_through(&rpc, &proxy, true).await;
    assert!(report.sync_send, "anvil offers eth_sendRawTransactionSync");
    let setup = Arc::new(setup);
    let answers = settle_at_once(&setup, 8).await;
    for (answer, _, from) in &answers {
        assert!(answer.as_ref().unwrap().success, "{answer:?}");
        assert_eq!(balance(&rpc, *from).await, units(1_000_000 - PRICE));
    }
    assert_eq!(balance(&rpc, setup.pay_to).await, units(8 * PRICE));
    assert_eq!(settler_nonce(&setup).await, 8);
    // The estimate is the simulation; the receipt comes with the send.
    assert_eq!(proxy.calls("eth_estimateGas"), 8);
    assert_eq!(
        proxy.calls("eth_sendRawTransactionSync"),
        8 + 1,
        "8 and the probe"
    );
    assert_eq!(proxy.calls("eth_call"), 0);
    assert_eq!(proxy.calls("eth_getTransactionReceipt"), 0);
    assert_eq!(proxy.calls("eth_sendRawTransaction"), 0);
}

#[tokio::test]
async fn simulations_take_turns_in_the_window_and_estimate_at_the_latest_block() {
    let rpc = shared_rpc_url();
    let proxy = RpcProxy::start(&rpc).await;
    let (setup, _) =
        settler_through_configured(&rpc, &proxy, |builder| builder.with_simulation_window(2)).await;
    let setup = Arc::new(setup);
    let answers = settle_at_once(&setup, 8).await;
    for (answer, _, _) in &answers {
        assert!(answer.as_ref().unwrap().success, "{answer:?}");
    }
    assert_eq!(balance(&rpc, setup.pay_to).await, units(8 * PRICE));
    assert_eq!(proxy.calls("eth_estimateGas"), 8);
    let most = proxy.most_at_once("eth_estimateGas");
    assert!(
        (1..=2).contains(&most),
        "{most} estimates at the node at once"
    );
    // At `latest`, as eth_call: anvil's default `pending` runs the whole pool first.
    assert_eq!(proxy.last_params("eth_estimateGas")[1], json!("latest"));
}

#[tokio::test]
async fn without_sync_send_one_block_watch_reads_the_receipts_and_falls_back_to_a_batch() {
    // One block a second: the settlements wait together for the next one.
    let chain = private_chain();
    rpc(&chain, "evm_setAutomine", json!([false])).await;
    rpc(&chain, "evm_setIntervalMining", json!([1])).await;
    for block_receipts in [true, false] {
        let proxy = RpcProxy::start(&chain).await;
        proxy.pretend_unsupported("eth_sendRawTransactionSync");
        if !block_receipts {
            proxy.pretend_unsupported("eth_getBlockReceipts");
        }
        let (setup, report) = settler_through(&chain, &proxy, true).await;
        assert!(!report.sync_send, "detected once at start");
        let setup = Arc::new(setup);
        let answers = settle_at_once(&setup, 6).await;
        for (answer, _, from) in &answers {
            assert!(answer.as_ref().unwrap().success, "{answer:?}");
            assert_eq!(balance(&chain, *from).await, units(1_000_000 - PRICE));
        }
        assert_eq!(settler_nonce(&setup).await, 6);
        assert_eq!(proxy.calls("eth_sendRawTransaction"), 6);
        let (by_block, one_by_one) = (
            proxy.calls("eth_getBlockReceipts"),
            proxy.calls("eth_getTransactionReceipt"),
        );
        if block_receipts {
            assert!(by_block >= 1, "the watch reads blocks");
            // At most the first look, before any block was read, asks for each.
            assert!(one_by_one <= 6, "{one_by_one} receipts read one by one");
        } else {
            assert_eq!(by_block, 1, "asked once, then never again");
            assert!(one_by_one >= 6, "batched receipt reads instead");
        }
    }
}

#[tokio::test]
async fn a_transaction_the_node_dropped_is_sent_again_when_the_chain_stalls_on_it() {
    let chain = private_chain();
    let proxy = RpcProxy::start(&chain).await;
    // The block watch's own rule, without sync sends.
    let (setup, _) = settler_through(&chain, &proxy, false).await;
    let setup = Arc::new(setup);
    let payments = funded_payments(&setup, 3).await;
    rpc(&chain, "evm_setAutomine", json!([false])).await;
    let settling = settle_all(&setup, payments.clone());
    let address = setup.settler.address();
    let pooled = |content: &serde_json::Value| {
        content["pending"][address.to_checksum(None)]
            .as_object()
            .or_else(|| content["pending"][format!("{address:#x}")].as_object())
            .cloned()
            .unwrap_or_default()
    };
    let mut first = None;
    for _ in 0..100 {
        let content = rpc(&chain, "txpool_content", json!([])).await;
        let pool = pooled(&content);
        if pool.len() == 3 {
            first = pool["0"]["hash"].as_str().map(str::to_owned);
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let first = first.expect("three settlement transactions in the pool");
    rpc(&chain, "anvil_dropTransaction", json!([first])).await;
    // Blocks go by: empty while the chain waits for nonce 0, then the watch sends it again.
    for _ in 0..60 {
        rpc(&chain, "evm_mine", json!([])).await;
        if settling.iter().all(tokio::task::JoinHandle::is_finished) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
    for task in settling {
        let (settled, _, _) = task.await.unwrap();
        assert!(settled.as_ref().unwrap().success, "{settled:?}");
    }
    rpc(&chain, "evm_setAutomine", json!([true])).await;
    for (_, from) in &payments {
        assert_eq!(balance(&chain, *from).await, units(1_000_000 - PRICE));
    }
    assert_eq!(balance(&chain, setup.pay_to).await, units(3 * PRICE));
    assert_eq!(settler_nonce(&setup).await, 3);
    no_transaction_left_waiting(&setup).await;
}

#[tokio::test]
async fn a_send_refused_mid_batch_is_unavailable_moves_nothing_and_leaves_no_gap() {
    let rpc = shared_rpc_url();
    let proxy = RpcProxy::start(&rpc).await;
    let (setup, _) = settler_through(&rpc, &proxy, true).await;
    let setup = Arc::new(setup);
    proxy.fault_send(2, SendFault::Refuse("txpool is full".into()));
    let answers = settle_at_once(&setup, 5).await;
    let mut refused = Vec::new();
    for (answer, request, from) in answers {
        match answer {
            Ok(settled) => {
                assert!(settled.success, "{settled:?}");
                assert_eq!(balance(&rpc, from).await, units(1_000_000 - PRICE));
            }
            Err(error) => {
                assert_eq!(error.kind(), &FacilitatorErrorKind::Unavailable, "{error}");
                assert!(error.to_string().contains("txpool is full"), "{error}");
                assert_eq!(balance(&rpc, from).await, units(1_000_000), "nothing moved");
                refused.push((request, from));
            }
        }
    }
    assert_eq!(refused.len(), 1, "one send refused");
    no_transaction_left_waiting(&setup).await;
    // Sent again, it lands, once.
    let (request, from) = refused.pop().unwrap();
    assert!(setup.settler.settle(&request).await.unwrap().success);
    assert_eq!(balance(&rpc, from).await, units(1_000_000 - PRICE));
    assert_eq!(balance(&rpc, setup.pay_to).await, units(5 * PRICE));
    no_transaction_left_waiting(&setup).await;
    // Five transfers, and at most one zero-value filler of the refused nonce.
    let nonce = settler_nonce(&setup).await;
    assert!((5..=6).contains(&nonce), "{nonce} transactions");
}

#[tokio::test]
async fn a_connection_cut_between_send_and_answer_settles_once() {
    let rpc = shared_rpc_url();
    for sync_send in [true, false] {
        let proxy = RpcProxy::start(&rpc).await;
        let (setup, _) = settler_through(&rpc, &proxy, sync_send).await;
        let (request, from) = funded_payment(&rpc, setup.pay_to, 1_000_000).await;
        proxy.fault_send(1, SendFault::Cut);
        let settled = setup.settler.settle(&request).await.unwrap();
        assert!(settled.success, "{settled:?}");
        assert_eq!(balance(&rpc, from).await, units(1_000_000 - PRICE));
        assert_eq!(balance(&rpc, setup.pay_to).await, units(PRICE));
        assert_eq!(settler_nonce(&setup).await, 1, "one transaction");
        no_transaction_left_waiting(&setup).await;
    }
}
