import Foundation
import OfflinePkgCLI

exit(await OfflinePkgCommand.main(Array(CommandLine.arguments.dropFirst())))
