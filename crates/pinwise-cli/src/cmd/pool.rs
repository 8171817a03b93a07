//! `pinwise pool`: the node-local pinned-memory service (the work is in the pinwise-pool
//! crate; this parses the arguments, starts it, or asks a running one for its accounting).
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use pinwise_pool::{PoolClient, Service, ServiceConfig};

use pinwise_core::units::parse_size;

/// Arguments of `pinwise pool`.
#[derive(Debug, clap::Args)]
pub struct PoolArgs {
    #[command(subcommand)]
    pub command: PoolCommand,
}

/// `pinwise pool` subcommands.
#[derive(Debug, clap::Subcommand)]
pub enum PoolCommand {
    /// Run the service: own pinned buffers for the processes of this node and do their
    /// host<->device copies through CUDA IPC (one GPU mapping of the pinned pages).
    #[command(
        after_help = "Examples:\n  pinwise pool serve --capacity 32G --client-budget 8G\n  \
                  PINWISE_POOL_SOCKET=/tmp/pool.sock pinwise pool serve\n\n\
                  Clients (the pinwise-pool library, `pinwise run --pool`) find it at the same \
                  socket path ($PINWISE_POOL_SOCKET). Users other than the service's own and \
                  root are refused unless listed with --allow-uid."
    )]
    Serve(ServeArgs),
    /// Print a running service's accounting (clients, buffers, pinned bytes, copies).
    Status(StatusArgs),
}

/// Arguments of `pinwise pool serve`.
#[derive(Debug, clap::Args)]
pub struct ServeArgs {
    /// The Unix socket to serve on [default: $PINWISE_POOL_SOCKET, else /run/pinwise/pool.sock].
    #[arg(long, value_name = "PATH")]
    pub socket: Option<PathBuf>,
    /// The GPU whose device memory clients copy to (CUDA ordinal).
    #[arg(long, default_value_t = 0, value_name = "N")]
    pub device: usize,
    /// Most bytes of pinned buffers, all clients together.
    #[arg(long, value_parser = parse_size, default_value = "16G", value_name = "BYTES")]
    pub capacity: u64,
    /// Most bytes of pinned buffers one client (connection) may hold [default: the capacity].
    #[arg(long, value_parser = parse_size, value_name = "BYTES")]
    pub client_budget: Option<u64>,
    /// Also serve this user id (repeatable).
    #[arg(long, value_name = "UID")]
    pub allow_uid: Vec<u32>,
    /// Use 4 KiB pages only (by default 2 MiB huge pages are tried first, when
    /// vm.nr_hugepages has enough reserved).
    #[arg(long)]
    pub no_huge_pages: bool,
}

/// Arguments of `pinwise pool status`.
#[derive(Debug, clap::Args)]
pub struct StatusArgs {
    /// The service's socket [default: $PINWISE_POOL_SOCKET, else /run/pinwise/pool.sock].
    #[arg(long, value_name = "PATH")]
    pub socket: Option<PathBuf>,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

/// Runs `pinwise pool`.
pub fn run(args: PoolArgs) -> Result<ExitCode> {
    match args.command {
        PoolCommand::Serve(a) => serve(a),
        PoolCommand::Status(a) => status(a),
    }
}

fn serve(args: ServeArgs) -> Result<ExitCode> {
    let socket = args.socket.unwrap_or_else(pinwise_pool::default_socket);
    if let Some(dir) = socket.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("creating the socket's directory {}", dir.display()))?;
    }
    let driver = pinwise_cuda::Driver::shared().context("loading the CUDA driver")?;
    let ctx = driver
        .device(args.device)
        .and_then(|d| d.primary_context())
        .with_context(|| format!("the primary context of GPU {}", args.device))?;
    let config = ServiceConfig {
        socket: socket.clone(),
        capacity: args.capacity,
        client_budget: args.client_budget.unwrap_or(args.capacity),
        allow_uids: args.allow_uid,
        huge_pages: !args.no_huge_pages,
        copy_limit: pinwise_pool::DEFAULT_COPY_LIMIT,
    };
    let service = Service::bind(config, ctx)?;
    eprintln!(
        "pinwise pool: serving GPU {} at {} (capacity {} bytes)",
        args.device,
        socket.display(),
        args.capacity
    );
    service.run().context("accepting connections")?;
    Ok(ExitCode::SUCCESS)
}

fn status(args: StatusArgs) -> Result<ExitCode> {
    let socket = args.socket.unwrap_or_else(pinwise_pool::default_socket);
    let pool = PoolClient::connect(&socket)?;
    let s = pool.stats()?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&s)?);
    } else {
        // This connection is one of the clients.
        println!("socket:        {}", socket.display());
        println!(
            "clients:       {} (besides this one)",
            s.clients.saturating_sub(1)
        );
        println!(
            "buffers:       {} ({} holds by clients)",
            s.buffers, s.attachments
        );
        println!(
            "pinned bytes:  {} of {} ({} on 2 MiB pages)",
            s.bytes, s.capacity, s.huge_bytes
        );
        println!("client budget: {}", s.client_budget);
        println!("device maps:   {}", s.devices);
        println!("copies:        {} ({} bytes)", s.copies, s.copied_bytes);
        println!(
            "shared:        {} bytes held by more than one client; not pinned again: \
             estimated GPU page-table memory saved {} bytes (8 B per 4 KiB page, an estimate)",
            s.deduplicated_bytes,
            s.estimated_gpu_pagetable_bytes_saved()
        );
    }
    Ok(ExitCode::SUCCESS)
}
